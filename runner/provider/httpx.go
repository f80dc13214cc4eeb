package provider

// Shared HTTP plumbing for the hand-written API clients (openai, anthropic).
// The clients are deliberately thin: one JSON POST, one streaming decode, no
// retries.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/net/http/httpguts"
)

const (
	// maxErrorBody bounds how much of an error answer we read: enough for any API's
	// error JSON, small enough that a misbehaving proxy cannot make us buffer a page.
	maxErrorBody = 64 << 10
	// maxErrorMessage bounds HTTPError.Message (in characters) so logs and reports
	// stay readable.
	maxErrorMessage = 500
	// maxErrorCode bounds HTTPError.Code; real codes are short identifiers.
	maxErrorCode = 100
	// maxDrain is how much unread response body we discard to keep a connection
	// reusable; past that, closing the connection is cheaper than reading on.
	maxDrain = 256 << 10
	// maxPooledBuffer keeps an occasional huge request from pinning its encoding
	// buffer in the pool forever.
	maxPooledBuffer = 1 << 20
	// MaxResponseBytes caps a model's answer (the whole JSON body): a real
	// completion is far smaller, and a misbehaving server must not make one
	// sample hold gigabytes. It matches the agent output cap.
	MaxResponseBytes = 16 << 20
)

// ErrResponseTooLarge is a 2xx answer larger than MaxResponseBytes. It is
// final: the same request would get the same answer.
var ErrResponseTooLarge = fmt.Errorf("the answer is larger than %d MiB, Proctor's cap on a model's response", MaxResponseBytes>>20)

// cappedBody reads at most max bytes and then fails with ErrResponseTooLarge
// (not io.EOF, which a decoder would take for a dropped connection, a
// transient failure).
type cappedBody struct {
	r    io.Reader
	left int64
}

func (c *cappedBody) Read(p []byte) (int, error) {
	if c.left <= 0 {
		// One byte more tells an answer of exactly the cap from a larger one.
		var one [1]byte
		if n, _ := c.r.Read(one[:]); n > 0 {
			return 0, ErrResponseTooLarge
		}
		return c.r.Read(p)
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}

// NewHTTPClient returns a client tuned for many concurrent calls to one host.
//
// Its Transport is a clone of http.DefaultTransport (so proxies from the
// environment, dial timeouts and HTTP/2 keep working) that keeps up to
// maxConnsPerHost idle connections per host: the default of 2 would make a run
// with more concurrent requests than that open and close connections constantly.
// It does not cap the number of active connections (MaxConnsPerHost), because a
// cap would queue requests inside the transport, out of sight of the engine's
// concurrency control and per-attempt deadlines. There is no Client.Timeout for
// the same reason: deadlines come with each call's context.
func NewHTTPClient(maxConnsPerHost int) *http.Client {
	perHost := max(maxConnsPerHost, 2)
	var t *http.Transport
	if dt, ok := http.DefaultTransport.(*http.Transport); ok {
		t = dt.Clone()
	} else {
		// Someone replaced the default transport; start from sane settings.
		t = &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			MaxIdleConns:          100,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ExpectContinueTimeout: time.Second,
		}
	}
	t.ForceAttemptHTTP2 = true
	t.MaxIdleConnsPerHost = perHost
	if t.MaxIdleConns != 0 { // 0 already means "no limit"
		t.MaxIdleConns = max(t.MaxIdleConns, 4*perHost)
	}
	return &http.Client{Transport: t, CheckRedirect: noRedirects}
}

// noRedirects makes a redirect the answer rather than following it. An API
// endpoint that redirects is a wrong baseURL (http for https, a moved host),
// and following it would resend the request and its headers elsewhere: Go drops
// Authorization on a change of host but not Anthropic's x-api-key nor the
// user's headers, and turns a POST into a GET on 301-303. ErrorFromResponse
// names the new location instead.
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// ParseRetryAfter returns how long the server asked us to wait.
//
// retry-after-ms (milliseconds, integer or decimal; sent by OpenAI and Azure) wins
// over the standard retry-after (delta-seconds, integer or decimal, or an HTTP-date
// measured from now). A header that is absent, invalid or negative counts as not
// sent, so an unusable retry-after-ms falls back to retry-after. The result is
// never negative; zero means the server did not say.
func ParseRetryAfter(h http.Header, now time.Time) time.Duration {
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, ok := parseNonNegativeDecimal(v); ok {
			return scaleDuration(ms, time.Millisecond)
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if s, ok := parseNonNegativeDecimal(v); ok {
		return scaleDuration(s, time.Second)
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}

// parseNonNegativeDecimal accepts only plain decimals ("3", "1.5", ".5"): strconv
// alone would also take signs, exponents, hex, "Inf" and "NaN", none of which a
// server means in a retry header.
func parseNonNegativeDecimal(s string) (float64, bool) {
	s = strings.TrimSpace(s)
	digits, dots := 0, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
			digits++
		case c == '.':
			dots++
		default:
			return 0, false
		}
	}
	if digits == 0 || dots > 1 {
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	return f, err == nil
}

// scaleDuration converts v units to a Duration, saturating instead of overflowing.
func scaleDuration(v float64, unit time.Duration) time.Duration {
	ns := v * float64(unit)
	if ns >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(ns)
}

// ErrorFromResponse turns a non-2xx answer into an *HTTPError. It reads at most
// 64 KiB of resp.Body but neither drains nor closes it: that stays the caller's job.
//
// It understands OpenAI's {"error":{"message","type","code"}} (code may be a
// string, a number or null; code is preferred to type) and Anthropic's
// {"type":"error","error":{"type","message"}}, plus the {"error":"..."},
// {"message":"..."} and {"detail":"..."} shapes of common compatible servers. When
// no message can be found, the message is the trimmed raw body. Secrets are
// removed before the message is truncated, so a secret cut at the limit cannot
// leak its first characters.
func ErrorFromResponse(resp *http.Response, secrets ...string) *HTTPError {
	e := &HTTPError{
		StatusCode: resp.StatusCode,
		RetryAfter: ParseRetryAfter(resp.Header, time.Now()),
	}
	var raw []byte
	if resp.Body != nil {
		// A read error (say, the connection dropped) leaves what we got so far,
		// which is still the best description available.
		raw, _ = io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	}
	msg, code := parseErrorBody(raw)
	if msg == "" {
		msg = strings.TrimSpace(string(raw))
	}
	if resp.StatusCode/100 == 3 {
		if loc := resp.Header.Get("Location"); loc != "" {
			msg = fmt.Sprintf("the server redirects to %s; set baseURL to the new address (Proctor does not follow redirects, which would send the request and its key elsewhere)", loc)
		}
	}
	e.Message = truncate(Redact(msg, secrets...), maxErrorMessage)
	e.Code = truncate(Redact(code, secrets...), maxErrorCode)
	return e
}

// ErrorInBody returns the error that a server put in the "error" member of a 2xx
// answer, or nil when raw (that member) is absent or null. Gateways do this
// (OpenRouter for an upstream failure; proxies of the Anthropic API), and such
// an answer has no completion: read as one it would score as an empty answer.
//
// Its StatusCode is the error's numeric code when it is one of 400-599, else
// what its type means (overloaded 529, server or API error 500, rate limit
// 429), else 200, which retry treats as final.
func ErrorInBody(raw json.RawMessage, secrets ...string) *HTTPError {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	wrapped := append(append([]byte(`{"error":`), raw...), '}')
	msg, code := parseErrorBody(wrapped)
	if msg == "" {
		msg = string(raw)
	}
	status := http.StatusOK
	if n, err := strconv.Atoi(code); err == nil && n >= 400 && n <= 599 {
		status = n
	} else if s, ok := bodyErrorStatus[code]; ok {
		status = s
	}
	if status != http.StatusOK {
		msg += " (in an HTTP 200 answer)"
	}
	return &HTTPError{
		StatusCode: status,
		Code:       truncate(Redact(code, secrets...), maxErrorCode),
		Message:    truncate(Redact(msg, secrets...), maxErrorMessage),
	}
}

// bodyErrorStatus maps error types to the status they come with when sent as
// an HTTP status, so that retries treat them alike.
var bodyErrorStatus = map[string]int{
	"overloaded_error":      529,
	"api_error":             http.StatusInternalServerError,
	"server_error":          http.StatusInternalServerError,
	"internal_server_error": http.StatusInternalServerError,
	"rate_limit_error":      http.StatusTooManyRequests,
	"rate_limit_exceeded":   http.StatusTooManyRequests,
}

// parseErrorBody extracts a message and a code from the error JSON shapes listed
// at ErrorFromResponse. Every field is decoded leniently (as raw JSON first) so
// that one unexpected type does not hide the others.
func parseErrorBody(raw []byte) (msg, code string) {
	var top struct {
		Error   json.RawMessage `json:"error"`
		Message json.RawMessage `json:"message"`
		Detail  json.RawMessage `json:"detail"`
		Code    json.RawMessage `json:"code"`
	}
	if json.Unmarshal(raw, &top) != nil {
		return "", ""
	}
	if s, ok := jsonScalar(top.Error); ok {
		msg = s
	} else if len(top.Error) > 0 {
		var inner struct {
			Message json.RawMessage `json:"message"`
			Type    json.RawMessage `json:"type"`
			Code    json.RawMessage `json:"code"`
		}
		if json.Unmarshal(top.Error, &inner) == nil {
			msg, _ = jsonScalar(inner.Message)
			if code, _ = jsonScalar(inner.Code); code == "" {
				code, _ = jsonScalar(inner.Type)
			}
		}
	}
	if msg == "" {
		msg, _ = jsonScalar(top.Message)
	}
	if msg == "" {
		msg, _ = jsonScalar(top.Detail)
	}
	if code == "" {
		code, _ = jsonScalar(top.Code)
	}
	return strings.TrimSpace(msg), strings.TrimSpace(code)
}

// jsonScalar returns a JSON string's value or a JSON number's text; anything
// else (null, objects, arrays, booleans) gives false.
func jsonScalar(raw json.RawMessage) (string, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "", false
	}
	switch c := raw[0]; {
	case c == '"':
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return "", false
		}
		return s, true
	case c == '-' || (c >= '0' && c <= '9'):
		var n json.Number
		if json.Unmarshal(raw, &n) != nil {
			return "", false
		}
		return n.String(), true
	}
	return "", false
}

// truncate shortens s to at most n characters, marking the cut with "…".
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	if n <= 0 {
		return ""
	}
	i, count := 0, 0
	for i = range s {
		if count == n-1 {
			break
		}
		count++
	}
	return s[:i] + "…"
}

// PostJSON sends in as a JSON POST to url and decodes a 2xx answer's JSON into
// out. header is cloned, never modified, so callers can build it once; a missing
// Content-Type is set to application/json.
//
// Errors are: an *HTTPError for a non-2xx answer (built by ErrorFromResponse
// with secrets removed); an error satisfying errors.Is(err, ctx.Err()) when ctx
// ended; otherwise a transport or decoding error. The response body is always
// drained (up to a limit) and closed so the connection can be reused. PostJSON
// never retries.
func PostJSON(ctx context.Context, c *http.Client, url string, header http.Header, in, out any, secrets ...string) error {
	data, err := encodeJSON(in)
	if err != nil {
		return fmt.Errorf("encoding request: %w", err)
	}
	// A *bytes.Reader body gets ContentLength and GetBody from NewRequest. GetBody
	// lets the transport resend the body on a fresh connection when a pooled
	// keep-alive connection turns out to be dead before anything was written; that
	// is not a retry policy, as the server never saw the first attempt.
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(data))
	if err != nil {
		return err
	}
	req.Header = header.Clone()
	if req.Header == nil {
		req.Header = make(http.Header, 1)
	}
	if req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}

	resp, err := c.Do(req)
	if err != nil {
		return contextError(ctx, err)
	}
	defer drainAndClose(resp.Body)
	ObserveRateLimits(ctx, resp.Header)

	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return ErrorFromResponse(resp, secrets...)
	}
	if err := json.NewDecoder(&cappedBody{r: resp.Body, left: MaxResponseBytes}).Decode(out); err != nil {
		return contextError(ctx, fmt.Errorf("decoding response: %w", err))
	}
	return nil
}

// encodeBuffers are scratch buffers for encoding request bodies, so that encoding
// does not grow a fresh buffer through several reallocations on every call.
var encodeBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// encodeJSON encodes v into a pooled buffer and returns an exact-size copy.
//
// The copy is what goes on the wire, not the pooled buffer itself: the transport
// may still be reading a request body after Client.Do has returned (it writes
// from another goroutine, and a server may answer before reading everything),
// and the only completion signal it gives is closing the body. A body type with
// a Close hook would provide that signal, but net/http recognises only
// *bytes.Reader-like bodies as in memory; any other type makes it flush the
// headers in a packet of their own, which measured about 10% slower per call
// than one allocation of the body's size.
func encodeJSON(v any) ([]byte, error) {
	buf := encodeBuffers.Get().(*bytes.Buffer)
	buf.Reset()
	defer func() {
		if buf.Cap() <= maxPooledBuffer { // do not pin an occasional huge buffer
			encodeBuffers.Put(buf)
		}
	}()
	enc := json.NewEncoder(buf)
	// Prompts are full of <, > and &: escaping them as \u003c makes bodies larger
	// and no server needs it.
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.Clone(buf.Bytes()), nil
}

// contextError makes sure an error caused by ctx ending satisfies
// errors.Is(err, ctx.Err()). net/http reports context.Cause, which is a custom
// error when the engine cancels with a cause, and a body read cut short by a
// cancellation may surface as a plain I/O error.
func contextError(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%w: %w", cerr, err)
	}
	return err
}

// drainAndClose discards what is left of a response body (up to maxDrain) and
// closes it: net/http only returns a connection to the idle pool when its body
// was read to the end.
func drainAndClose(body io.ReadCloser) {
	_, _ = io.CopyN(io.Discard, body, maxDrain)
	_ = body.Close()
}

// BaseURL validates a provider's base URL, which is required, and returns it
// without a trailing slash. kind names the provider in errors.
func BaseURL(kind, raw string) (*url.URL, error) {
	if raw == "" {
		return nil, fmt.Errorf("%s: a base URL is required", kind)
	}
	u, err := url.Parse(strings.TrimRight(raw, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%s: invalid base URL %q: want an absolute http or https URL", kind, raw)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		// The endpoint path is appended to the base URL, which a query would break.
		return nil, fmt.Errorf("%s: invalid base URL %q: it must not have a query or fragment", kind, raw)
	}
	return u, nil
}

// JSONHeaders are the headers of a JSON API call: content negotiation, the
// provider's fixed headers, then the user's extra ones (applied last, so they can
// override). The fixed headers may carry the API key; pass it as secret so errors
// never show it.
func JSONHeaders(fixed, extra map[string]string) http.Header {
	h := make(http.Header, 2+len(fixed)+len(extra))
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "application/json")
	for k, v := range fixed {
		h.Set(k, v)
	}
	for k, v := range extra {
		h.Set(k, v)
	}
	return h
}

// CheckHeaders reports a header that net/http would refuse to send: every call
// would fail with it, so it is better refused before the first one.
func CheckHeaders(h map[string]string) error {
	for _, k := range slices.Sorted(maps.Keys(h)) {
		if !httpguts.ValidHeaderFieldName(k) {
			return fmt.Errorf("%q is not a valid header name", k)
		}
		if !httpguts.ValidHeaderFieldValue(h[k]) {
			return fmt.Errorf("%s: the value holds a newline or another control character, which a header cannot", k)
		}
	}
	return nil
}

// ClientOrDefault returns c, or a pooled client when c is nil.
func ClientOrDefault(c *http.Client) *http.Client {
	if c == nil {
		return NewHTTPClient(16)
	}
	return c
}

// Endpoint is the JSON API endpoint a provider posts its requests to: the URL,
// the client, the headers (the API key among them) and the secrets no error
// may show.
type Endpoint struct {
	client  *http.Client
	url     string
	header  http.Header // cloned per request by PostJSON
	secrets []string
}

// Credential is how an API key travels: in Header, as Prefix + key.
type Credential struct {
	Header, Prefix string
}

// NewEndpoint is the endpoint at url, sending the provider's fixed headers,
// the key (when not empty) as cred says, then the user's extra headers, which
// may override the others. A nil client means ClientOrDefault's.
func NewEndpoint(client *http.Client, url string, fixed map[string]string, cred Credential, key string, extra map[string]string) Endpoint {
	e := Endpoint{client: ClientOrDefault(client), url: url}
	if key != "" {
		fixed = maps.Clone(fixed)
		if fixed == nil {
			fixed = map[string]string{}
		}
		fixed[cred.Header] = cred.Prefix + key
		e.secrets = []string{key}
	}
	e.header = JSONHeaders(fixed, extra)
	return e
}

// Post sends body as JSON and decodes a 2xx answer into out (PostJSON).
func (e *Endpoint) Post(ctx context.Context, body, out any) error {
	return PostJSON(ctx, e.client, e.url, e.header, body, out, e.secrets...)
}

// Secrets are what errors about this endpoint must never show (the key).
func (e *Endpoint) Secrets() []string { return e.secrets }

// URL is where requests go.
func (e *Endpoint) URL() string { return e.url }
