package main

import (
	"net"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/net/dns/dnsmessage"
)

func query(t *testing.T, name string, typ dnsmessage.Type) []byte {
	t.Helper()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 42, RecursionDesired: true})
	if err := b.StartQuestions(); err != nil {
		t.Fatal(err)
	}
	if err := b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: typ, Class: dnsmessage.ClassINET}); err != nil {
		t.Fatal(err)
	}
	msg, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

type result struct {
	RCode   dnsmessage.RCode
	Answers []string
}

func parse(t *testing.T, msg []byte) result {
	t.Helper()
	var m dnsmessage.Message
	if err := m.Unpack(msg); err != nil {
		t.Fatalf("unpacking the answer: %v", err)
	}
	if m.Header.ID != 42 || !m.Header.Response {
		t.Fatalf("header %+v: want the query's ID and the response bit", m.Header)
	}
	r := result{RCode: m.Header.RCode}
	for _, a := range m.Answers {
		switch b := a.Body.(type) {
		case *dnsmessage.AResource:
			r.Answers = append(r.Answers, net.IP(b.A[:]).String())
		case *dnsmessage.AAAAResource:
			r.Answers = append(r.Answers, net.IP(b.AAAA[:]).String())
		}
	}
	return r
}

func TestAnswer(t *testing.T) {
	services := map[string]string{"proctor-system/fakellm": "10.96.0.42", "default/kubernetes": "10.96.0.1", "v6/svc": "fd00::1"}
	z := &zone{domain: "cluster.local", lookup: func(ns, name string) (string, bool) {
		ip, ok := services[ns+"/"+name]
		return ip, ok
	}}
	cases := []struct {
		name string
		q    string
		typ  dnsmessage.Type
		want result
	}{
		{"service", "fakellm.proctor-system.svc.cluster.local.", dnsmessage.TypeA, result{dnsmessage.RCodeSuccess, []string{"10.96.0.42"}}},
		{"case-insensitive", "FakeLLM.Proctor-System.svc.Cluster.Local.", dnsmessage.TypeA, result{dnsmessage.RCodeSuccess, []string{"10.96.0.42"}}},
		{"AAAA of an IPv4 service is empty, not an error", "fakellm.proctor-system.svc.cluster.local.", dnsmessage.TypeAAAA, result{RCode: dnsmessage.RCodeSuccess}},
		{"IPv6 service", "svc.v6.svc.cluster.local.", dnsmessage.TypeAAAA, result{dnsmessage.RCodeSuccess, []string{"fd00::1"}}},
		{"unknown service", "nope.proctor-system.svc.cluster.local.", dnsmessage.TypeA, result{RCode: dnsmessage.RCodeNameError}},
		{"search-path expansion of a short name", "fakellm.proctor-system.svc.proctor-system.svc.cluster.local.", dnsmessage.TypeA, result{RCode: dnsmessage.RCodeNameError}},
		{"namespace only", "proctor-system.svc.cluster.local.", dnsmessage.TypeA, result{RCode: dnsmessage.RCodeNameError}},
		{"pod records are not served", "10-244-0-5.default.pod.cluster.local.", dnsmessage.TypeA, result{RCode: dnsmessage.RCodeNameError}},
		{"outside the domain without upstream", "api.openai.com.", dnsmessage.TypeA, result{RCode: dnsmessage.RCodeRefused}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := parse(t, z.answer(query(t, tc.q, tc.typ), "udp"))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("answer to %s (-want +got):\n%s", tc.q, diff)
			}
		})
	}
}

// TestForward checks that names outside the cluster domain are relayed to the
// upstream resolver and its answer returned unchanged.
func TestForward(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	up := &zone{domain: "example.com", lookup: func(ns, name string) (string, bool) { return "192.0.2.7", true }}
	go serveUDP(pc, up)

	z := &zone{domain: "cluster.local", upstream: pc.LocalAddr().String(), lookup: func(string, string) (string, bool) { return "", false }}
	got := parse(t, z.answer(query(t, "api.default.svc.example.com.", dnsmessage.TypeA), "udp"))
	want := result{dnsmessage.RCodeSuccess, []string{"192.0.2.7"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("forwarded answer (-want +got):\n%s", diff)
	}
}

func TestGarbageIsDropped(t *testing.T) {
	z := &zone{domain: "cluster.local"}
	if got := z.answer([]byte{1, 2, 3}, "udp"); got != nil {
		t.Errorf("answer to 3 bytes of garbage = %v, want none", got)
	}
}
