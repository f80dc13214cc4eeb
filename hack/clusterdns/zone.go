package main

import (
	"io"
	"net"
	"net/netip"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// zone answers one DNS message: names under svc.<domain> from lookup, other names
// through the upstream resolver.
type zone struct {
	domain   string
	upstream string
	// lookup returns the ClusterIP of Service name in namespace ns.
	lookup func(ns, name string) (ip string, ok bool)
}

// ttl is short: Services come and go during tests.
const ttl = 5

// answer returns the response to the query msg, or nil to drop it (unparsable).
func (z *zone) answer(msg []byte, network string) []byte {
	var p dnsmessage.Parser
	hdr, err := p.Start(msg)
	if err != nil || hdr.Response {
		return nil
	}
	q, err := p.Question()
	if err != nil {
		return reply(hdr, nil, dnsmessage.RCodeFormatError, nil)
	}
	name := strings.ToLower(strings.TrimSuffix(q.Name.String(), "."))
	suffix := "." + strings.ToLower(z.domain)
	if name != strings.ToLower(z.domain) && !strings.HasSuffix(name, suffix) {
		return z.forward(msg, hdr, q, network)
	}
	if q.Class != dnsmessage.ClassINET {
		return reply(hdr, &q, dnsmessage.RCodeNotImplemented, nil)
	}
	// <service>.<namespace>.svc.<domain>
	labels := strings.Split(strings.TrimSuffix(name, suffix), ".")
	if len(labels) != 3 || labels[2] != "svc" {
		return reply(hdr, &q, dnsmessage.RCodeNameError, nil)
	}
	ip, ok := z.lookup(labels[1], labels[0])
	if !ok {
		return reply(hdr, &q, dnsmessage.RCodeNameError, nil)
	}
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return reply(hdr, &q, dnsmessage.RCodeServerFailure, nil)
	}
	// The name exists: a query for another type (AAAA) gets an empty NOERROR.
	if (q.Type == dnsmessage.TypeA || q.Type == dnsmessage.TypeALL) && addr.Is4() {
		return reply(hdr, &q, dnsmessage.RCodeSuccess, &dnsmessage.AResource{A: addr.As4()})
	}
	if (q.Type == dnsmessage.TypeAAAA || q.Type == dnsmessage.TypeALL) && addr.Is6() {
		return reply(hdr, &q, dnsmessage.RCodeSuccess, &dnsmessage.AAAAResource{AAAA: addr.As16()})
	}
	return reply(hdr, &q, dnsmessage.RCodeSuccess, nil)
}

// forward relays a query outside the cluster domain to the upstream resolver.
func (z *zone) forward(msg []byte, hdr dnsmessage.Header, q dnsmessage.Question, network string) []byte {
	if z.upstream == "" {
		return reply(hdr, &q, dnsmessage.RCodeRefused, nil)
	}
	c, err := net.DialTimeout(network, z.upstream, 2*time.Second)
	if err != nil {
		return reply(hdr, &q, dnsmessage.RCodeServerFailure, nil)
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return reply(hdr, &q, dnsmessage.RCodeServerFailure, nil)
	}
	if network == "tcp" {
		msg = append([]byte{byte(len(msg) >> 8), byte(len(msg))}, msg...)
	}
	if _, err := c.Write(msg); err != nil {
		return reply(hdr, &q, dnsmessage.RCodeServerFailure, nil)
	}
	if network == "tcp" {
		var l [2]byte
		if _, err := io.ReadFull(c, l[:]); err != nil {
			return reply(hdr, &q, dnsmessage.RCodeServerFailure, nil)
		}
		buf := make([]byte, int(l[0])<<8|int(l[1]))
		if _, err := io.ReadFull(c, buf); err != nil {
			return reply(hdr, &q, dnsmessage.RCodeServerFailure, nil)
		}
		return buf
	}
	buf := make([]byte, 65535)
	n, err := c.Read(buf)
	if err != nil {
		return reply(hdr, &q, dnsmessage.RCodeServerFailure, nil)
	}
	return buf[:n]
}

// reply builds a response to the query with header hdr and question q.
func reply(hdr dnsmessage.Header, q *dnsmessage.Question, rcode dnsmessage.RCode, rr dnsmessage.ResourceBody) []byte {
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{
		ID:                 hdr.ID,
		Response:           true,
		OpCode:             hdr.OpCode,
		Authoritative:      rcode != dnsmessage.RCodeServerFailure && rcode != dnsmessage.RCodeRefused,
		RecursionDesired:   hdr.RecursionDesired,
		RecursionAvailable: true,
		RCode:              rcode,
	})
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil
	}
	if q != nil {
		if err := addAnswer(&b, *q, rr); err != nil {
			return nil
		}
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}

// addAnswer adds the question q and, if rr is an address, its answer.
func addAnswer(b *dnsmessage.Builder, q dnsmessage.Question, rr dnsmessage.ResourceBody) error {
	if err := b.Question(q); err != nil {
		return err
	}
	if err := b.StartAnswers(); err != nil {
		return err
	}
	h := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: ttl}
	switch r := rr.(type) {
	case *dnsmessage.AResource:
		return b.AResource(h, *r)
	case *dnsmessage.AAAAResource:
		return b.AAAAResource(h, *r)
	}
	return nil
}
