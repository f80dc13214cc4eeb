package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/proctor-dev/proctor/runner/provider"
)

// The Batch API: a JSONL file of chat completion requests is uploaded
// (POST /files, purpose batch), a batch made of it (POST /batches, tagged in
// its metadata), and its output and error files read once it ended.
// Documented limits: 50,000 requests and 200 MB a batch.
const (
	batchMaxRequests = 50000
	batchMaxBytes    = 200 << 20
	// batchKeyTag is the metadata key a batch's submission key is kept under.
	batchKeyTag = "proctor_key"
)

var _ provider.Batcher = (*Provider)(nil)

// BatchLimits implements provider.Batcher.
func (p *Provider) BatchLimits() (int, int) { return batchMaxRequests, batchMaxBytes }

// EncodeBatchRequest implements provider.Batcher: one line of the input file.
func (p *Provider) EncodeBatchRequest(customID string, req *provider.Request) ([]byte, error) {
	return json.Marshal(struct {
		CustomID string       `json:"custom_id"`
		Method   string       `json:"method"`
		URL      string       `json:"url"`
		Body     *chatRequest `json:"body"`
	}{customID, "POST", "/v1/chat/completions", p.newRequest(req)})
}

// batchObject is a batch as the API shows it.
type batchObject struct {
	ID           string  `json:"id"`
	Status       string  `json:"status"`
	OutputFileID *string `json:"output_file_id"`
	ErrorFileID  *string `json:"error_file_id"`
	CreatedAt    int64   `json:"created_at"`
	Errors       *struct {
		Data []struct {
			Code    string `json:"code"`
			Message string `json:"message"`
			Line    *int   `json:"line"`
		} `json:"data"`
	} `json:"errors"`
	RequestCounts struct {
		Total     int `json:"total"`
		Completed int `json:"completed"`
		Failed    int `json:"failed"`
	} `json:"request_counts"`
	Metadata map[string]string `json:"metadata"`
}

func (b *batchObject) state() provider.BatchState {
	st := provider.BatchState{ID: b.ID, Status: b.Status, Total: b.RequestCounts.Total, Succeeded: b.RequestCounts.Completed,
		Failed: b.RequestCounts.Failed, Created: time.Unix(b.CreatedAt, 0)}
	switch b.Status {
	case "completed", "expired", "cancelled":
		st.Ended = true
	case "failed":
		st.Ended = true
		var msgs []string
		if b.Errors != nil {
			for _, e := range b.Errors.Data {
				m := e.Code + ": " + e.Message
				if e.Line != nil {
					m = fmt.Sprintf("line %d: %s", *e.Line, m)
				}
				msgs = append(msgs, m)
			}
		}
		st.Failure = "the batch failed validation"
		if len(msgs) > 0 {
			st.Failure += ": " + strings.Join(msgs, "; ")
		}
	}
	return st
}

// SubmitBatch implements provider.Batcher: the entries are uploaded as a file,
// and a batch made of it with key in its metadata.
func (p *Provider) SubmitBatch(ctx context.Context, key string, entries [][]byte) (string, error) {
	var file []byte
	for _, e := range entries {
		file = append(append(file, e...), '\n')
	}
	var f struct {
		ID string `json:"id"`
	}
	if err := p.api.Upload(ctx, "/files", map[string]string{"purpose": "batch"}, "file", "batch.jsonl", file, &f); err != nil {
		return "", fmt.Errorf("uploading the batch file: %w", err)
	}
	var b batchObject
	err := p.api.JSON(ctx, "POST", "/batches", map[string]any{
		"input_file_id": f.ID, "endpoint": "/v1/chat/completions", "completion_window": "24h",
		"metadata": map[string]string{batchKeyTag: key},
	}, &b)
	if err != nil {
		return "", fmt.Errorf("creating the batch: %w", err)
	}
	if b.ID == "" {
		return "", errors.New("creating the batch: the answer has no id")
	}
	return b.ID, nil
}

// FindBatch implements provider.Batcher: the newest batches are listed, back
// to since, for one tagged key.
func (p *Provider) FindBatch(ctx context.Context, key string, since time.Time, _ int, known func(string) bool) (string, error) {
	after := ""
	for page := 0; page < 100; page++ {
		var list struct {
			Data    []batchObject `json:"data"`
			HasMore bool          `json:"has_more"`
			LastID  string        `json:"last_id"`
		}
		path := "/batches?limit=100"
		if after != "" {
			path += "&after=" + after
		}
		if err := p.api.JSON(ctx, "GET", path, nil, &list); err != nil {
			return "", fmt.Errorf("listing batches: %w", err)
		}
		for _, b := range list.Data {
			if time.Unix(b.CreatedAt, 0).Before(since.Add(-time.Second)) /* whole seconds */ {
				return "", nil // older than the submission: not there
			}
			if b.Metadata[batchKeyTag] == key && !known(b.ID) {
				return b.ID, nil
			}
		}
		if !list.HasMore || list.LastID == "" {
			return "", nil
		}
		after = list.LastID
	}
	return "", nil
}

// Batch implements provider.Batcher.
func (p *Provider) Batch(ctx context.Context, id string) (provider.BatchState, error) {
	var b batchObject
	if err := p.api.JSON(ctx, "GET", "/batches/"+id, nil, &b); err != nil {
		return provider.BatchState{}, err
	}
	return b.state(), nil
}

// CancelBatch implements provider.Batcher.
func (p *Provider) CancelBatch(ctx context.Context, id string) error {
	return p.api.JSON(ctx, "POST", "/batches/"+id+"/cancel", nil, nil)
}

// BatchResults implements provider.Batcher: the output file, then the error
// file.
func (p *Provider) BatchResults(ctx context.Context, id string, fn func(provider.BatchResult) error) error {
	var b batchObject
	if err := p.api.JSON(ctx, "GET", "/batches/"+id, nil, &b); err != nil {
		return err
	}
	for _, file := range []*string{b.OutputFileID, b.ErrorFileID} {
		if file == nil || *file == "" {
			continue
		}
		if err := p.readResults(ctx, *file, fn); err != nil {
			return err
		}
	}
	return nil
}

// resultLine is a line of an output or error file.
type resultLine struct {
	CustomID string `json:"custom_id"`
	Response *struct {
		StatusCode int             `json:"status_code"`
		Body       json.RawMessage `json:"body"`
	} `json:"response"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func (p *Provider) readResults(ctx context.Context, file string, fn func(provider.BatchResult) error) error {
	body, err := p.api.Download(ctx, "/files/"+file+"/content")
	if err != nil {
		return fmt.Errorf("reading batch file %s: %w", file, err)
	}
	defer body.Close()
	return provider.EachLine(body, "batch file "+file, func(line []byte) error { return fn(p.parseResult(line)) })
}

func (p *Provider) parseResult(line []byte) provider.BatchResult {
	var l resultLine
	if err := json.Unmarshal(line, &l); err != nil {
		return provider.BatchResult{Err: fmt.Errorf("a result line is not JSON: %w", err)}
	}
	res := provider.BatchResult{CustomID: l.CustomID}
	switch {
	case l.Error != nil:
		res.Err = &provider.HTTPError{StatusCode: 500, Code: l.Error.Code, Message: provider.Redact(l.Error.Message, p.api.Secrets()...)}
		res.Expired = l.Error.Code == "batch_expired"
		res.Canceled = l.Error.Code == "batch_cancelled"
	case l.Response == nil:
		res.Err = errors.New("the result has neither a response nor an error")
	case l.Response.StatusCode != 200:
		e := provider.ErrorInBody(l.Response.Body, p.api.Secrets()...)
		if e == nil {
			e = &provider.HTTPError{Message: "the request failed"}
		}
		if b := []byte(l.Response.Body); len(b) > 0 {
			var wrapped struct {
				Error json.RawMessage `json:"error"`
			}
			if json.Unmarshal(b, &wrapped) == nil {
				if inner := provider.ErrorInBody(wrapped.Error, p.api.Secrets()...); inner != nil {
					e = inner
				}
			}
		}
		e.StatusCode = l.Response.StatusCode
		res.Err = e
	default:
		var out chatResponse
		if err := json.Unmarshal(l.Response.Body, &out); err != nil {
			res.Err = fmt.Errorf("decoding the answer: %w", err)
			break
		}
		res.Response, res.Err = out.toResponse()
	}
	return res
}
