package provider

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"time"
)

// Batcher runs requests through a provider's batch API (OpenAI's Batch API,
// Anthropic's Message Batches): submitted together, answered within hours,
// at a discount. Its methods make one HTTP request each (BatchResults reads
// one or two files) and never retry: the engine does.
type Batcher interface {
	// BatchLimits are the most requests, and bytes of encoded requests, that
	// one batch may hold.
	BatchLimits() (requests, bytes int)
	// EncodeBatchRequest is a request as one entry of a batch, named by
	// customID (unique in its batch: at most 64 letters, digits, _ or -).
	EncodeBatchRequest(customID string, req *Request) ([]byte, error)
	// SubmitBatch submits encoded requests as one batch, tagged with key
	// where the provider keeps tags, and returns its id.
	SubmitBatch(ctx context.Context, key string, entries [][]byte) (string, error)
	// FindBatch looks for a batch of n requests submitted with key that the
	// provider says it created at or after since (BatchClockSkew before the
	// intent: the provider's clock is not ours), that known does not claim:
	// "" when there is none. It is how a batch whose submission was not
	// recorded (a crash in between) is found again instead of submitted
	// twice.
	FindBatch(ctx context.Context, key string, since time.Time, n int, known func(id string) bool) (string, error)
	// Batch says where a batch is.
	Batch(ctx context.Context, id string) (BatchState, error)
	// BatchResults reads an ended batch's results, in the provider's order.
	BatchResults(ctx context.Context, id string, fn func(BatchResult) error) error
	// CancelBatch asks the provider to stop a batch; its requests not yet
	// processed end canceled.
	CancelBatch(ctx context.Context, id string) error
}

// BatchClockSkew is how far a provider's clock may be behind ours: a batch
// whose submission was not recorded is looked for among those the provider
// says it created since that long before the intent. Its creation time is
// the provider's, in whole seconds; ours comes from another clock.
const BatchClockSkew = 10 * time.Minute

// BatchState is what the provider says of a batch.
type BatchState struct {
	ID string
	// Status is the provider's word for it (in_progress, completed, ended...).
	Status string
	// Ended: its results can be read (it completed, expired, was cancelled,
	// or failed as a whole: then Failure says why).
	Ended   bool
	Failure string
	// Total, Succeeded and Failed count its requests (failed, expired and
	// canceled ones are Failed).
	Total, Succeeded, Failed int
	Created                  time.Time
}

// BatchResult is one request's outcome in a batch.
type BatchResult struct {
	CustomID string
	// Response is the answer of a request that succeeded.
	Response *Response
	// Err is why it failed (an *HTTPError when the provider gave a status).
	Err error
	// Expired and Canceled: it was not processed (the batch's window ended,
	// or it was cancelled); Err says so too.
	Expired, Canceled bool
}

// API makes the plain requests of a batch API: JSON in and out, an upload,
// a download; with the provider's headers and key, whose errors never show
// the key.
type API struct {
	client  *http.Client
	base    string
	header  http.Header
	secrets []string
}

// NewAPI is the API at base (the provider's API root).
func NewAPI(client *http.Client, base string, fixed map[string]string, cred Credential, key string, extra map[string]string) *API {
	e := NewEndpoint(client, base, fixed, cred, key, extra)
	return &API{client: e.client, base: base, header: e.header, secrets: e.secrets}
}

// Secrets are what errors about this API must never show.
func (a *API) Secrets() []string { return a.secrets }

// JSON sends in (nil: no body) to base+path and decodes the answer into out.
func (a *API) JSON(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encoding request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	resp, err := a.do(ctx, method, path, "application/json", body)
	if err != nil {
		return err
	}
	defer drainAndClose(resp.Body)
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(&cappedBody{r: resp.Body, left: MaxResponseBytes}).Decode(out); err != nil {
		return contextError(ctx, fmt.Errorf("decoding response: %w", err))
	}
	return nil
}

// RawJSON posts an already encoded JSON body.
func (a *API) RawJSON(ctx context.Context, path string, body []byte, out any) error {
	resp, err := a.do(ctx, http.MethodPost, path, "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer drainAndClose(resp.Body)
	return json.NewDecoder(&cappedBody{r: resp.Body, left: MaxResponseBytes}).Decode(out)
}

// Upload posts a multipart form of fields and one file.
func (a *API) Upload(ctx context.Context, path string, fields map[string]string, fileField, fileName string, data []byte, out any) error {
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	for k, v := range fields {
		if err := mw.WriteField(k, v); err != nil {
			return err
		}
	}
	fw, err := mw.CreateFormFile(fileField, fileName)
	if err != nil {
		return err
	}
	if _, err := fw.Write(data); err != nil {
		return err
	}
	if err := mw.Close(); err != nil {
		return err
	}
	resp, err := a.do(ctx, http.MethodPost, path, mw.FormDataContentType(), &form)
	if err != nil {
		return err
	}
	defer drainAndClose(resp.Body)
	return json.NewDecoder(&cappedBody{r: resp.Body, left: MaxResponseBytes}).Decode(out)
}

// Download gets base+path, or an absolute URL on the API's host (a results
// URL); the caller closes the body.
func (a *API) Download(ctx context.Context, path string) (io.ReadCloser, error) {
	resp, err := a.do(ctx, http.MethodGet, path, "", nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

func (a *API) do(ctx context.Context, method, path, contentType string, body io.Reader) (*http.Response, error) {
	target := a.base + path
	if u, err := url.Parse(path); err == nil && u.IsAbs() {
		// An address the provider gave (a results URL) gets the key only on
		// the API's own host.
		b, err := url.Parse(a.base)
		if err != nil || b.Scheme != u.Scheme || b.Host != u.Host {
			return nil, fmt.Errorf("refusing to send the API key to %s, which is not the API's host", u.Redacted())
		}
		target = path
	}
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return nil, err
	}
	req.Header = a.header.Clone()
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	} else {
		req.Header.Del("Content-Type")
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return nil, contextError(ctx, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer drainAndClose(resp.Body)
		return nil, ErrorFromResponse(resp, a.secrets...)
	}
	return resp, nil
}

// EachLine calls fn with each line of a JSONL body that is not blank (a
// line of any length: an answer may be large), until fn fails or the body
// ends; the error of a read names what, from where.
func EachLine(r io.Reader, what string, fn func(line []byte) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			if ferr := fn(line); ferr != nil {
				return ferr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading %s: %w", what, err)
		}
	}
}
