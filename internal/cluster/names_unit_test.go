package cluster

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/validation"
)

func hash8(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:8]
}

func TestChildName(t *testing.T) {
	long := strings.Repeat("a", 60)
	cases := []struct {
		name  string
		max   int
		parts []string
		want  string
	}{
		{"short", 63, []string{"arith", "small", "1a2b3c4d"}, "arith-small-1a2b3c4d"},
		{"one part", 63, []string{"x"}, "x"},
		{"exactly max", 10, []string{"abcd", "efghi"}, "abcd-efghi"},
		{"one over max", 10, []string{"abcd", "efghij"}, "a-" + hash8("abcd-efghij")},
		{
			"cut and hashed",
			63, []string{long, "model", "run"},
			strings.Repeat("a", 54) + "-" + hash8(long+"-model-run"),
		},
		{
			// The cut would end in "-" or "."; they are trimmed before the hash.
			"no dash or dot before the hash",
			20, []string{"abcdefghi.", "-jklmnopqrstu"},
			"abcdefghi-" + hash8("abcdefghi.--jklmnopqrstu"),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := ChildName(tc.max, tc.parts...)
			if got != tc.want {
				t.Errorf("ChildName(%d, %q) = %q, want %q", tc.max, tc.parts, got, tc.want)
			}
			if len(got) > tc.max {
				t.Errorf("len = %d > %d", len(got), tc.max)
			}
		})
	}
}

func TestChildNameProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789-."
	seen := map[string]string{}
	for i := range 3000 {
		n := 1 + rng.IntN(300)
		var b strings.Builder
		b.WriteByte('a')
		for range n - 1 {
			b.WriteByte(alphabet[rng.IntN(len(alphabet))])
		}
		in := b.String()
		for _, max := range []int{MaxJobName, MaxName - 8, MaxName} {
			got := ChildName(max, in)
			if len(got) > max {
				t.Fatalf("ChildName(%d, %q) is %d long", max, in, len(got))
			}
			if len(in) <= max && got != in {
				t.Fatalf("ChildName(%d, %q) = %q, want it unchanged", max, in, got)
			}
			if again := ChildName(max, in); again != got {
				t.Fatalf("ChildName is not stable: %q then %q", got, again)
			}
			if max == MaxJobName {
				if prev, dup := seen[got]; dup && prev != in {
					t.Fatalf("%q and %q both become %q", prev, in, got)
				}
				seen[got] = in
			}
		}
		// Names that share a long prefix stay distinct.
		a, b2 := ChildName(MaxJobName, in, strings.Repeat("x", 70), "1"), ChildName(MaxJobName, in, strings.Repeat("x", 70), "2")
		if a == b2 {
			t.Fatalf("names differing only at the end collide: %q (iteration %d)", a, i)
		}
	}
}

func TestLabelValue(t *testing.T) {
	names := []string{
		"arith",
		"a.b.c",
		strings.Repeat("abc.", 40) + "z",       // 161 characters, dots
		strings.Repeat("a", 61) + "-." + "bcd", // the cut would end in "-."
		strings.Repeat("x", 253),
	}
	for _, n := range names {
		got := LabelValue(n)
		if errs := validation.IsValidLabelValue(got); len(errs) > 0 {
			t.Errorf("LabelValue(%q) = %q: %v", n, got, errs)
		}
		if len(n) <= 63 && got != n {
			t.Errorf("LabelValue(%q) = %q, want it unchanged", n, got)
		}
	}
	if LabelValue(strings.Repeat("x", 100)) == LabelValue(strings.Repeat("x", 101)) {
		t.Errorf("long names collide")
	}
}

func TestChildNames(t *testing.T) {
	got := []string{
		RunnerName("arith"), BudgetName("arith"), ResultsName("arith"), PlanName("arith", "r1"),
		PlannerJobName("arith", "r1"), JobName("arith", "small", "r1"), CacheSourcesName("arith", "r1"),
		HeadName("arith", "r1", "small", 0), HeadName("arith", "r1", "small", 12), ChunkName("arith-r1-small-3", 7),
	}
	want := []string{
		"arith-runner", "arith-budget", "arith-results", "arith-r1-plan",
		"arith-r1-plan", "arith-small-r1", "arith-r1-cache",
		"arith-r1-small-0", "arith-r1-small-12", "arith-r1-small-3-7",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("child names (-want +got):\n%s", diff)
	}
	for _, i := range []int{0, 1, 9, 10, 123, 4567890} {
		if got, want := itoa(i), fmt.Sprint(i); got != want {
			t.Errorf("itoa(%d) = %q", i, got)
		}
	}
	wantLabels := map[string]string{
		LabelManagedBy: "proctor", LabelEvaluation: "arith", LabelComponent: ComponentShard, LabelRun: "r1",
	}
	if diff := cmp.Diff(wantLabels, Labels("arith", "r1", ComponentShard)); diff != "" {
		t.Errorf("Labels (-want +got):\n%s", diff)
	}
	if _, ok := Labels("arith", "", ComponentBudget)[LabelRun]; ok {
		t.Errorf("Labels without a run has a run label")
	}
}

// An Indexed Job's pods are named (hostname) <job>-<index>, which the API server
// requires to be a DNS-1123 label: it refuses the Job otherwise ("will not able
// to create pod with invalid DNS label").
func TestJobNamesLeaveRoomForTheIndex(t *testing.T) {
	const run = "1a2b3c4d"
	const completions = 1000
	cases := []struct{ eval, model string }{
		{"arith", "small"},
		{strings.Repeat("e", 40), strings.Repeat("m", 20)}, // joined: 70 characters, cut to 63
		{strings.Repeat("e", 253), "small"},
		{"qa.v2", "small"}, // Evaluation names are DNS subdomains: dots are allowed
	}
	var bad []string
	for _, tc := range cases {
		host := fmt.Sprintf("%s-%d", JobName(tc.eval, tc.model, run), completions-1)
		if errs := validation.IsDNS1123Label(host); len(errs) > 0 {
			bad = append(bad, fmt.Sprintf("%s (%d characters): %v", host, len(host), errs))
		}
	}
	if len(bad) > 0 {
		t.Errorf("pod hostnames that are not DNS labels:\n%s", strings.Join(bad, "\n"))
	}
}

// A shard's chunks are named ChunkName(head-<writer>, k): they must stay valid
// ConfigMap names however long the head's name is.
func TestChunkNamesFitAConfigMapName(t *testing.T) {
	head := HeadName(strings.Repeat("e", 240), "1a2b3c4d", "small", 12)
	if len(head) > MaxName-8 {
		t.Fatalf("head name is %d long", len(head))
	}
	chunk := ChunkName(head+"-"+"abcdef", 0) // as kube.Store.seal names its first chunk
	if errs := validation.IsDNS1123Subdomain(chunk); len(errs) > 0 {
		t.Errorf("chunk name %q is not a valid ConfigMap name: %v", chunk, errs)
	}
}
