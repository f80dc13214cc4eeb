package fakellm_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/provider/anthropic"
	"github.com/proctor-dev/proctor/runner/provider/openai"
	"github.com/proctor-dev/proctor/test/fakellm"
)

// TestBatchClients: Proctor's clients of both batch APIs against the fake
// server: submitted batches are found again by their key (OpenAI) or their
// time and size (Anthropic), followed to their end, and their results read,
// answers and failures alike.
func TestBatchClients(t *testing.T) {
	srv := fakellm.New(fakellm.Config{APIKey: "sk-b", BatchDelay: 50 * time.Millisecond, BatchFailureRate: 0.1, BatchExpireRate: 0.05, Seed: 7})
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	oa, err := openai.New(openai.Config{BaseURL: hs.URL + "/v1", APIKey: "sk-b", Model: "fake-model"})
	if err != nil {
		t.Fatal(err)
	}
	an, err := anthropic.New(anthropic.Config{BaseURL: hs.URL, APIKey: "sk-b", Model: "fake-claude", Params: provider.Params{MaxTokens: 16}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const n = 120
	for name, b := range map[string]provider.Batcher{"openai": oa, "anthropic": an} {
		t.Run(name, func(t *testing.T) {
			var entries [][]byte
			for i := 1; i <= n; i++ {
				e, err := b.EncodeBatchRequest(fmt.Sprintf("r_%d", i), &provider.Request{Messages: []provider.Message{
					{Role: provider.RoleUser, Content: fmt.Sprintf("What is %d+%d?", i, i)}}})
				if err != nil {
					t.Fatal(err)
				}
				entries = append(entries, e)
			}
			since := time.Now()
			id, err := b.SubmitBatch(ctx, "key-"+name, entries)
			if err != nil {
				t.Fatal(err)
			}
			none := func(string) bool { return false }
			found, err := b.FindBatch(ctx, "key-"+name, since, n, none)
			if err != nil || found != id {
				t.Errorf("FindBatch = %q, %v; want %s", found, err, id)
			}
			if found, _ := b.FindBatch(ctx, "key-"+name, since, n, func(x string) bool { return x == id }); found != "" {
				t.Errorf("FindBatch found %s, which is known", found)
			}
			if found, _ := b.FindBatch(ctx, "key-"+name, time.Now().Add(time.Hour), n, none); found != "" {
				t.Errorf("FindBatch found %s, older than since", found)
			}
			var st provider.BatchState
			for deadline := time.Now().Add(5 * time.Second); !st.Ended; time.Sleep(20 * time.Millisecond) {
				if st, err = b.Batch(ctx, id); err != nil || time.Now().After(deadline) {
					t.Fatalf("Batch = %+v, %v", st, err)
				}
			}
			if st.Total != n || st.Succeeded+st.Failed != n || st.Failed == 0 {
				t.Errorf("ended: %+v", st)
			}
			got := map[string]provider.BatchResult{}
			if err := b.BatchResults(ctx, id, func(r provider.BatchResult) error {
				got[r.CustomID] = r
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			var ok, failed, expired int
			for i := 1; i <= n; i++ {
				r, seen := got[fmt.Sprintf("r_%d", i)]
				switch {
				case !seen:
					t.Errorf("no result for r_%d", i)
				case r.Err == nil && r.Response != nil:
					ok++
					if r.Response.Text != fmt.Sprint(2*i) || r.Response.Usage.InputTokens == 0 {
						t.Errorf("r_%d: %+v", i, r.Response)
					}
				case r.Expired:
					expired++
				default:
					failed++
					if h, isHTTP := provider.AsHTTPError(r.Err); !isHTTP || h.StatusCode != 500 {
						t.Errorf("r_%d failed with %v", i, r.Err)
					}
				}
			}
			if ok != st.Succeeded || ok+failed+expired != n || expired == 0 || failed == 0 {
				t.Errorf("%d answered, %d failed, %d expired; state %+v", ok, failed, expired, st)
			}
		})
	}
	if st := srv.Stats(); st.Batches != 2 || st.BatchRequests != 2*n || st.DuplicateBatchRequests != 0 || st.Requests != 0 {
		t.Errorf("stats %+v", st)
	}
}
