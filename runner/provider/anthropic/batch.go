package anthropic

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/proctor-dev/proctor/runner/provider"
)

// Message Batches: POST /v1/messages/batches with the requests, GET its
// results (JSONL) once it ended. Documented limits: 100,000 requests and
// 256 MB a batch. A batch keeps no tags: FindBatch matches by creation time
// and size.
const (
	batchMaxRequests = 100000
	batchMaxBytes    = 256 << 20
)

var _ provider.Batcher = (*Provider)(nil)

// BatchLimits implements provider.Batcher.
func (p *Provider) BatchLimits() (int, int) { return batchMaxRequests, batchMaxBytes }

// EncodeBatchRequest implements provider.Batcher: one entry of "requests".
func (p *Provider) EncodeBatchRequest(customID string, req *provider.Request) ([]byte, error) {
	return json.Marshal(struct {
		CustomID string           `json:"custom_id"`
		Params   *messagesRequest `json:"params"`
	}{customID, p.newRequest(req)})
}

// batchObject is a message batch as the API shows it.
type batchObject struct {
	ID               string    `json:"id"`
	ProcessingStatus string    `json:"processing_status"`
	CreatedAt        time.Time `json:"created_at"`
	ResultsURL       *string   `json:"results_url"`
	RequestCounts    struct {
		Processing int `json:"processing"`
		Succeeded  int `json:"succeeded"`
		Errored    int `json:"errored"`
		Canceled   int `json:"canceled"`
		Expired    int `json:"expired"`
	} `json:"request_counts"`
}

func (b *batchObject) total() int {
	c := b.RequestCounts
	return c.Processing + c.Succeeded + c.Errored + c.Canceled + c.Expired
}

func (b *batchObject) state() provider.BatchState {
	c := b.RequestCounts
	return provider.BatchState{ID: b.ID, Status: b.ProcessingStatus, Ended: b.ProcessingStatus == "ended", Total: b.total(),
		Succeeded: c.Succeeded, Failed: c.Errored + c.Canceled + c.Expired, Created: b.CreatedAt}
}

// SubmitBatch implements provider.Batcher. Message batches keep no tag: key
// is not sent.
func (p *Provider) SubmitBatch(ctx context.Context, _ string, entries [][]byte) (string, error) {
	body := append([]byte(`{"requests":[`), bytes.Join(entries, []byte(","))...)
	body = append(body, "]}"...)
	var b batchObject
	if err := p.api.RawJSON(ctx, "/messages/batches", body, &b); err != nil {
		return "", fmt.Errorf("creating the batch: %w", err)
	}
	if b.ID == "" {
		return "", errors.New("creating the batch: the answer has no id")
	}
	return b.ID, nil
}

// FindBatch implements provider.Batcher: with no tags to go by, the oldest
// batch of n requests created at or after since that known does not claim.
func (p *Provider) FindBatch(ctx context.Context, _ string, since time.Time, n int, known func(string) bool) (string, error) {
	after, found := "", ""
	for page := 0; page < 100; page++ {
		var list struct {
			Data    []batchObject `json:"data"`
			HasMore bool          `json:"has_more"`
			LastID  string        `json:"last_id"`
		}
		path := "/messages/batches?limit=100"
		if after != "" {
			path += "&after_id=" + url.QueryEscape(after)
		}
		if err := p.api.JSON(ctx, "GET", path, nil, &list); err != nil {
			return "", fmt.Errorf("listing batches: %w", err)
		}
		for _, b := range list.Data {
			if b.CreatedAt.Before(since.Add(-time.Second)) /* whole seconds */ {
				return found, nil
			}
			if b.total() == n && !known(b.ID) {
				found = b.ID // newest first: keep going for an older one
			}
		}
		if !list.HasMore || list.LastID == "" {
			return found, nil
		}
		after = list.LastID
	}
	return found, nil
}

// Batch implements provider.Batcher.
func (p *Provider) Batch(ctx context.Context, id string) (provider.BatchState, error) {
	var b batchObject
	if err := p.api.JSON(ctx, "GET", "/messages/batches/"+id, nil, &b); err != nil {
		return provider.BatchState{}, err
	}
	return b.state(), nil
}

// CancelBatch implements provider.Batcher.
func (p *Provider) CancelBatch(ctx context.Context, id string) error {
	return p.api.JSON(ctx, "POST", "/messages/batches/"+id+"/cancel", nil, nil)
}

// resultLine is a line of a batch's results.
type resultLine struct {
	CustomID string `json:"custom_id"`
	Result   struct {
		Type    string               `json:"type"`
		Message *messagesResponse    `json:"message"`
		Error   *struct{ Error any } `json:"error"`
	} `json:"result"`
}

// BatchResults implements provider.Batcher.
func (p *Provider) BatchResults(ctx context.Context, id string, fn func(provider.BatchResult) error) error {
	var b batchObject
	if err := p.api.JSON(ctx, "GET", "/messages/batches/"+id, nil, &b); err != nil {
		return err
	}
	if b.ResultsURL == nil {
		return fmt.Errorf("batch %s has no results yet (%s)", id, b.ProcessingStatus)
	}
	results, err := p.resultsURL(*b.ResultsURL)
	if err != nil {
		return err
	}
	body, err := p.api.Download(ctx, results)
	if err != nil {
		return fmt.Errorf("reading the results of batch %s: %w", id, err)
	}
	defer body.Close()
	return provider.EachLine(body, "the results of batch "+id, func(line []byte) error { return fn(p.parseResult(line)) })
}

// resultsURL resolves a results_url against the API's address.
func (p *Provider) resultsURL(raw string) (string, error) {
	base, err := url.Parse(p.apiBase)
	if err != nil {
		return "", err
	}
	ref, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("results_url %q: %w", raw, err)
	}
	return base.ResolveReference(ref).String(), nil
}

func (p *Provider) parseResult(line []byte) provider.BatchResult {
	var l resultLine
	if err := json.Unmarshal(line, &l); err != nil {
		return provider.BatchResult{Err: fmt.Errorf("a result line is not JSON: %w", err)}
	}
	res := provider.BatchResult{CustomID: l.CustomID}
	switch l.Result.Type {
	case "succeeded":
		if l.Result.Message == nil {
			res.Err = errors.New("a succeeded result has no message")
			break
		}
		res.Response = l.Result.Message.toResponse()
	case "errored":
		var raw json.RawMessage
		if l.Result.Error != nil {
			raw, _ = json.Marshal(l.Result.Error.Error)
		}
		e := provider.ErrorInBody(raw, p.api.Secrets()...)
		if e == nil {
			e = &provider.HTTPError{StatusCode: 500, Message: "the request failed in the batch"}
		}
		res.Err = e
	case "expired":
		res.Expired, res.Err = true, &provider.HTTPError{StatusCode: 500, Code: "expired", Message: "the batch ended before the request was processed"}
	case "canceled":
		res.Canceled, res.Err = true, &provider.HTTPError{StatusCode: 500, Code: "canceled", Message: "the batch was cancelled before the request was processed"}
	default:
		res.Err = fmt.Errorf("unknown result type %q", l.Result.Type)
	}
	return res
}
