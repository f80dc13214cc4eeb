package fakellm_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/test/fakellm"
)

// batchClient speaks to a fake server's batch APIs over HTTP.
type batchClient struct {
	t   *testing.T
	url string
}

func newBatchServer(t *testing.T, cfg fakellm.Config) (*fakellm.Server, *batchClient) {
	t.Helper()
	srv := fakellm.New(cfg)
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return srv, &batchClient{t: t, url: hs.URL}
}

func (c *batchClient) do(method, path, contentType string, body io.Reader) (int, []byte) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.url+path, body)
	if err != nil {
		c.t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (c *batchClient) json(method, path string, in any, out any) int {
	c.t.Helper()
	var body io.Reader
	if in != nil {
		b, _ := json.Marshal(in)
		body = bytes.NewReader(b)
	}
	code, b := c.do(method, path, "application/json", body)
	if out != nil && code == 200 {
		if err := json.Unmarshal(b, out); err != nil {
			c.t.Fatalf("%s %s: %v: %s", method, path, err, b)
		}
	}
	return code
}

// upload uploads an OpenAI batch input file of the questions "What is i+i?"
// (custom ids PREFIX-i) and returns its id.
func (c *batchClient) upload(prefix string, ids []int) string {
	c.t.Helper()
	var file bytes.Buffer
	for _, i := range ids {
		fmt.Fprintf(&file, `{"custom_id":"%s-%d","method":"POST","url":"/v1/chat/completions","body":{"model":"fake-model","messages":[{"role":"user","content":"What is %d+%d?"}]}}`+"\n", prefix, i, i, i)
	}
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	_ = mw.WriteField("purpose", "batch")
	fw, _ := mw.CreateFormFile("file", "batch.jsonl")
	_, _ = fw.Write(file.Bytes())
	mw.Close()
	code, b := c.do("POST", "/v1/files", mw.FormDataContentType(), &form)
	var f struct{ ID string }
	if code != 200 || json.Unmarshal(b, &f) != nil || f.ID == "" {
		c.t.Fatalf("upload: %d %s", code, b)
	}
	return f.ID
}

type openAIBatch struct {
	ID            string
	Status        string
	OutputFileID  *string        `json:"output_file_id"`
	ErrorFileID   *string        `json:"error_file_id"`
	RequestCounts map[string]int `json:"request_counts"`
	Metadata      map[string]string
}

func (c *batchClient) createOpenAI(fileID string, meta map[string]string) openAIBatch {
	c.t.Helper()
	var b openAIBatch
	if code := c.json("POST", "/v1/batches", map[string]any{"input_file_id": fileID, "endpoint": "/v1/chat/completions",
		"completion_window": "24h", "metadata": meta}, &b); code != 200 {
		c.t.Fatalf("create: %d", code)
	}
	return b
}

// lines reads a JSONL file of the server.
func (c *batchClient) lines(path string) []map[string]json.RawMessage {
	c.t.Helper()
	code, b := c.do("GET", path, "", nil)
	if code != 200 {
		c.t.Fatalf("GET %s: %d %s", path, code, b)
	}
	var out []map[string]json.RawMessage
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			c.t.Fatalf("%s: %v", path, err)
		}
		out = append(out, m)
	}
	return out
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i + 1
	}
	return out
}

func customID(m map[string]json.RawMessage) string {
	var s string
	_ = json.Unmarshal(m["custom_id"], &s)
	return s
}

func TestOpenAIBatch(t *testing.T) {
	srv, c := newBatchServer(t, fakellm.Config{BatchDelay: 100 * time.Millisecond})
	b := c.createOpenAI(c.upload("q", seq(40)), map[string]string{"proctor-submission": "abc"})
	if b.Status != "in_progress" || b.RequestCounts["total"] != 40 || b.Metadata["proctor-submission"] != "abc" {
		t.Fatalf("created: %+v", b)
	}
	time.Sleep(150 * time.Millisecond)
	c.json("GET", "/v1/batches/"+b.ID, nil, &b)
	if b.Status != "completed" || b.OutputFileID == nil || b.ErrorFileID != nil || b.RequestCounts["completed"] != 40 {
		t.Fatalf("after its delay: %+v", b)
	}
	out := c.lines("/v1/files/" + *b.OutputFileID + "/content")
	var order []int
	for _, l := range out {
		var resp struct {
			StatusCode int `json:"status_code"`
			Body       struct {
				Choices []struct{ Message struct{ Content string } }
				Usage   struct {
					PromptTokens int64 `json:"prompt_tokens"`
				}
			}
		}
		if err := json.Unmarshal(l["response"], &resp); err != nil || resp.StatusCode != 200 || len(resp.Body.Choices) != 1 || resp.Body.Usage.PromptTokens == 0 {
			t.Fatalf("output line %s: %v", l["response"], err)
		}
		var i int
		_, _ = fmt.Sscanf(customID(l), "q-%d", &i)
		if got := resp.Body.Choices[0].Message.Content; got != fmt.Sprint(2*i) {
			t.Errorf("%s answered %q", customID(l), got)
		}
		order = append(order, i)
	}
	if len(order) != 40 || slices.IsSorted(order) {
		t.Errorf("output order %v: want all 40, not in submission order", order)
	}
	st := srv.Stats()
	if st.Batches != 1 || st.BatchRequests != 40 || st.DuplicateBatchRequests != 0 || st.Requests != 0 || st.BatchInputTokens == 0 {
		t.Errorf("stats %+v", st)
	}

	// Submitted again after success: duplicates.
	c.createOpenAI(c.upload("q", seq(5)), nil)
	if got := srv.Stats().DuplicateBatchRequests; got != 5 {
		t.Errorf("DuplicateBatchRequests = %d, want 5", got)
	}

	// Listing, newest first, a page at a time.
	var page struct {
		Data    []openAIBatch
		HasMore bool   `json:"has_more"`
		LastID  string `json:"last_id"`
	}
	c.json("GET", "/v1/batches?limit=1", nil, &page)
	if len(page.Data) != 1 || !page.HasMore || page.Data[0].ID == b.ID {
		t.Fatalf("first page %+v", page)
	}
	c.json("GET", "/v1/batches?limit=1&after="+page.LastID, nil, &page)
	if len(page.Data) != 1 || page.Data[0].ID != b.ID {
		t.Errorf("second page %+v", page)
	}
}

func TestOpenAIBatchFailuresAndExpiry(t *testing.T) {
	srv, c := newBatchServer(t, fakellm.Config{BatchFailureRate: 0.2, BatchExpireRate: 0.1, Seed: 3})
	b := c.createOpenAI(c.upload("q", seq(200)), nil)
	c.json("GET", "/v1/batches/"+b.ID, nil, &b)
	if b.Status != "expired" || b.ErrorFileID == nil || b.RequestCounts["failed"] == 0 || b.RequestCounts["completed"]+b.RequestCounts["failed"] != 200 {
		t.Fatalf("%+v", b)
	}
	codes := map[string]int{}
	var failed []int
	for _, l := range c.lines("/v1/files/" + *b.ErrorFileID + "/content") {
		var e struct{ Code string }
		var r struct {
			StatusCode int `json:"status_code"`
		}
		_ = json.Unmarshal(l["error"], &e)
		_ = json.Unmarshal(l["response"], &r)
		switch {
		case e.Code == "batch_expired":
			codes["expired"]++
		case r.StatusCode == 500:
			codes["500"]++
		default:
			t.Errorf("error line %v", l)
		}
		var i int
		_, _ = fmt.Sscanf(customID(l), "q-%d", &i)
		failed = append(failed, i)
	}
	if codes["expired"] < 5 || codes["500"] < 20 || len(failed) != b.RequestCounts["failed"] {
		t.Errorf("errors %v of %d failed", codes, b.RequestCounts["failed"])
	}
	// Failed and expired requests may be submitted again: not duplicates.
	c.createOpenAI(c.upload("q", failed), nil)
	if got := srv.Stats().DuplicateBatchRequests; got != 0 {
		t.Errorf("DuplicateBatchRequests = %d after resubmitting the failed ones", got)
	}
}

func TestOpenAIBatchValidation(t *testing.T) {
	_, c := newBatchServer(t, fakellm.Config{})
	file := func(lines ...string) string {
		var form bytes.Buffer
		mw := multipart.NewWriter(&form)
		_ = mw.WriteField("purpose", "batch")
		fw, _ := mw.CreateFormFile("file", "b.jsonl")
		_, _ = fw.Write([]byte(strings.Join(lines, "\n")))
		mw.Close()
		_, b := c.do("POST", "/v1/files", mw.FormDataContentType(), &form)
		var f struct{ ID string }
		_ = json.Unmarshal(b, &f)
		return f.ID
	}
	ok := `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":"hi"}]}}`
	for name, id := range map[string]string{
		"duplicate custom_id": file(ok, ok),
		"wrong url":           file(strings.Replace(ok, "/v1/chat/completions", "/v1/embeddings", 1)),
		"not JSON":            file("{"),
	} {
		b := c.createOpenAI(id, nil)
		if b.Status != "failed" {
			t.Errorf("%s: status %q, want failed", name, b.Status)
		}
	}
}

func TestAnthropicBatch(t *testing.T) {
	srv, c := newBatchServer(t, fakellm.Config{BatchDelay: 100 * time.Millisecond, BatchFailureRate: 0.1, Seed: 1, BatchCancelDelay: 10 * time.Millisecond})
	var reqs []any
	for i := 1; i <= 50; i++ {
		reqs = append(reqs, map[string]any{"custom_id": fmt.Sprintf("s_%d", i), "params": map[string]any{
			"model": "fake-claude", "max_tokens": 16, "messages": []any{map[string]any{"role": "user", "content": fmt.Sprintf("What is %d+%d?", i, i)}}}})
	}
	var b struct {
		ID               string
		ProcessingStatus string         `json:"processing_status"`
		RequestCounts    map[string]int `json:"request_counts"`
		ResultsURL       *string        `json:"results_url"`
	}
	if code := c.json("POST", "/v1/messages/batches", map[string]any{"requests": reqs}, &b); code != 200 || b.ProcessingStatus != "in_progress" || b.RequestCounts["processing"] != 50 {
		t.Fatalf("create: %d %+v", code, b)
	}
	if code, _ := c.do("GET", "/v1/messages/batches/"+b.ID+"/results", "", nil); code != 404 {
		t.Errorf("results before the end: %d", code)
	}
	time.Sleep(150 * time.Millisecond)
	c.json("GET", "/v1/messages/batches/"+b.ID, nil, &b)
	if b.ProcessingStatus != "ended" || b.ResultsURL == nil || b.RequestCounts["succeeded"]+b.RequestCounts["errored"] != 50 || b.RequestCounts["errored"] == 0 {
		t.Fatalf("after its delay: %+v", b)
	}
	types := map[string]int{}
	for _, l := range c.lines(*b.ResultsURL) {
		var r struct {
			Type    string
			Message struct {
				Content []struct{ Text string }
			}
		}
		_ = json.Unmarshal(l["result"], &r)
		types[r.Type]++
		if r.Type == "succeeded" {
			var i int
			_, _ = fmt.Sscanf(customID(l), "s_%d", &i)
			if len(r.Message.Content) != 1 || r.Message.Content[0].Text != fmt.Sprint(2*i) {
				t.Errorf("%s: %+v", customID(l), r.Message)
			}
		}
	}
	if types["succeeded"] != b.RequestCounts["succeeded"] || types["errored"] != b.RequestCounts["errored"] {
		t.Errorf("result types %v, counts %v", types, b.RequestCounts)
	}
	if st := srv.Stats(); st.BatchRequests != 50 || st.Requests != 0 {
		t.Errorf("stats %+v", st)
	}
	bad := map[string]any{"requests": []any{map[string]any{"custom_id": "has space", "params": map[string]any{}}}}
	if code := c.json("POST", "/v1/messages/batches", bad, nil); code != 400 {
		t.Errorf("a bad custom_id: %d", code)
	}
	// Cancelled before it ends: canceling for a while, then every request
	// canceled.
	var cb struct {
		ID                string
		ProcessingStatus  string         `json:"processing_status"`
		RequestCounts     map[string]int `json:"request_counts"`
		CancelInitiatedAt *string        `json:"cancel_initiated_at"`
	}
	c.json("POST", "/v1/messages/batches", map[string]any{"requests": reqs[:3]}, &cb)
	c.json("POST", "/v1/messages/batches/"+cb.ID+"/cancel", nil, &cb)
	if cb.ProcessingStatus != "canceling" || cb.CancelInitiatedAt == nil {
		t.Errorf("just cancelled: %+v", cb)
	}
	time.Sleep(20 * time.Millisecond)
	c.json("GET", "/v1/messages/batches/"+cb.ID, nil, &cb)
	if cb.ProcessingStatus != "ended" || cb.RequestCounts["canceled"] != 3 {
		t.Errorf("cancelled: %+v", cb)
	}
}
