// Command clusterdns is the local cluster's DNS (hack/cluster-up.sh): it answers
// A queries for <service>.<namespace>.svc.<domain> with the Service's ClusterIP,
// from a watch on Services, and forwards every other name to the host's resolver.
//
// The local cluster has no DNS add-on (there is no CoreDNS image without a
// registry), yet users' Evaluations name Services, as they would on any cluster:
// this gives them the same names. It serves only what Proctor's users need: no
// headless Services, no SRV or PTR records, no pod records.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the cluster whose Services to serve")
	listen := flag.String("listen", "127.0.0.1:53", "UDP and TCP `address` to answer on")
	upstream := flag.String("upstream", "", "`address` of the resolver for names outside the cluster domain (none: refuse them)")
	domain := flag.String("domain", "cluster.local", "the cluster domain")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, *kubeconfig, *listen, *upstream, *domain)
	stop()
	if err != nil {
		log.Fatalf("clusterdns: %v", err)
	}
}

func run(ctx context.Context, kubeconfig, listen, upstream, domain string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("loading kubeconfig %q: %w", kubeconfig, err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactory(cs, 10*time.Minute)
	lister := factory.Core().V1().Services().Lister()
	factory.Start(ctx.Done())
	z := &zone{
		domain:   domain,
		upstream: upstream,
		lookup: func(ns, name string) (string, bool) {
			svc, err := lister.Services(ns).Get(name)
			if err != nil || svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone {
				return "", false
			}
			return svc.Spec.ClusterIP, true
		},
	}

	pc, err := net.ListenPacket("udp", listen)
	if err != nil {
		return fmt.Errorf("listening on udp %s: %w", listen, err)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		pc.Close()
		return fmt.Errorf("listening on tcp %s: %w", listen, err)
	}
	go func() { <-ctx.Done(); pc.Close(); ln.Close() }()
	for _, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return errors.New("the Service watch never synced")
		}
	}
	log.Printf("Serving %s on %s (upstream %q)", domain, listen, upstream)

	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); serveUDP(pc, z) }()
	go func() { defer wg.Done(); serveTCP(ln, z) }()
	wg.Wait()
	return nil
}

func serveUDP(pc net.PacketConn, z *zone) {
	buf := make([]byte, 4096)
	for {
		n, addr, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		q := append([]byte(nil), buf[:n]...)
		go func() {
			if resp := z.answer(q, "udp"); resp != nil {
				_, _ = pc.WriteTo(resp, addr) // a lost UDP answer is the client's to retry
			}
		}()
	}
}

func serveTCP(ln net.Listener, z *zone) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			for {
				if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
					return
				}
				var l [2]byte
				if _, err := io.ReadFull(c, l[:]); err != nil {
					return
				}
				q := make([]byte, int(l[0])<<8|int(l[1]))
				if _, err := io.ReadFull(c, q); err != nil {
					return
				}
				resp := z.answer(q, "tcp")
				if resp == nil {
					return
				}
				if _, err := c.Write(append([]byte{byte(len(resp) >> 8), byte(len(resp))}, resp...)); err != nil {
					return
				}
			}
		}()
	}
}
