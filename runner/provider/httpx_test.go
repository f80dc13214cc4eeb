package provider

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

func TestNewHTTPClient(t *testing.T) {
	tests := []struct {
		in          int
		wantPerHost int
	}{
		{in: 0, wantPerHost: 2},
		{in: 1, wantPerHost: 2},
		{in: 16, wantPerHost: 16},
		{in: 500, wantPerHost: 500},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.in), func(t *testing.T) {
			c := NewHTTPClient(tt.in)
			if c.Timeout != 0 {
				t.Errorf("Timeout = %v, want 0 (deadlines come from the context)", c.Timeout)
			}
			tr, ok := c.Transport.(*http.Transport)
			if !ok {
				t.Fatalf("Transport is %T, want *http.Transport", c.Transport)
			}
			if tr == http.DefaultTransport {
				t.Error("Transport is http.DefaultTransport itself, want a clone")
			}
			if tr.MaxIdleConnsPerHost != tt.wantPerHost {
				t.Errorf("MaxIdleConnsPerHost = %d, want %d", tr.MaxIdleConnsPerHost, tt.wantPerHost)
			}
			if tr.MaxIdleConns != 0 && tr.MaxIdleConns < tt.wantPerHost {
				t.Errorf("MaxIdleConns = %d, want at least %d", tr.MaxIdleConns, tt.wantPerHost)
			}
			if !tr.ForceAttemptHTTP2 {
				t.Error("ForceAttemptHTTP2 = false, want true")
			}
			if tr.Proxy == nil {
				t.Error("Proxy = nil, want the default transport's ProxyFromEnvironment")
			}
			if tr.MaxConnsPerHost != 0 {
				t.Errorf("MaxConnsPerHost = %d, want 0 (no cap)", tr.MaxConnsPerHost)
			}
		})
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	date := func(d time.Duration) string { return now.Add(d).Format(http.TimeFormat) }
	tests := []struct {
		name   string
		header map[string]string
		want   time.Duration
	}{
		{name: "absent", want: 0},
		{name: "ms integer", header: map[string]string{"retry-after-ms": "1500"}, want: 1500 * time.Millisecond},
		{name: "ms float", header: map[string]string{"retry-after-ms": "20.5"}, want: 20500 * time.Microsecond},
		{name: "ms wins over seconds", header: map[string]string{"retry-after-ms": "250", "retry-after": "7"}, want: 250 * time.Millisecond},
		{name: "ms zero", header: map[string]string{"retry-after-ms": "0"}, want: 0},
		{name: "ms invalid falls back", header: map[string]string{"retry-after-ms": "soon", "retry-after": "3"}, want: 3 * time.Second},
		{name: "ms negative falls back", header: map[string]string{"retry-after-ms": "-5", "retry-after": "2"}, want: 2 * time.Second},
		{name: "ms negative alone", header: map[string]string{"retry-after-ms": "-5"}, want: 0},
		{name: "seconds integer", header: map[string]string{"retry-after": "30"}, want: 30 * time.Second},
		{name: "seconds float", header: map[string]string{"retry-after": "1.25"}, want: 1250 * time.Millisecond},
		{name: "seconds with spaces", header: map[string]string{"retry-after": " 4 "}, want: 4 * time.Second},
		{name: "seconds negative", header: map[string]string{"retry-after": "-1"}, want: 0},
		{name: "seconds garbage", header: map[string]string{"retry-after": "later"}, want: 0},
		{name: "seconds exponent", header: map[string]string{"retry-after": "1e3"}, want: 0},
		{name: "seconds NaN", header: map[string]string{"retry-after": "NaN"}, want: 0},
		{name: "seconds two dots", header: map[string]string{"retry-after": "1.2.3"}, want: 0},
		{name: "seconds huge saturates", header: map[string]string{"retry-after": "99999999999999999999"}, want: time.Duration(1<<63 - 1)},
		{name: "http date future", header: map[string]string{"retry-after": date(90 * time.Second)}, want: 90 * time.Second},
		{name: "http date past", header: map[string]string{"retry-after": date(-time.Minute)}, want: 0},
		{name: "http date rfc850", header: map[string]string{"retry-after": now.Add(time.Minute).Format(time.RFC850)}, want: time.Minute},
		{name: "http date ansi c", header: map[string]string{"retry-after": now.Add(time.Minute).Format(time.ANSIC)}, want: time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tt.header {
				h.Set(k, v)
			}
			if got := ParseRetryAfter(h, now); got != tt.want {
				t.Errorf("ParseRetryAfter(%v) = %v, want %v", tt.header, got, tt.want)
			}
		})
	}
}

func TestErrorFromResponse(t *testing.T) {
	const key = "sk-test-0123456789abcdef"
	long := strings.Repeat("é", 600)
	tests := []struct {
		name   string
		status int
		header map[string]string
		body   string
		want   *HTTPError
	}{
		{
			name:   "openai string code",
			status: 429,
			header: map[string]string{"retry-after-ms": "1200"},
			body:   `{"error":{"message":"You exceeded your current quota.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`,
			want:   &HTTPError{StatusCode: 429, Code: "insufficient_quota", Message: "You exceeded your current quota.", RetryAfter: 1200 * time.Millisecond},
		},
		{
			name:   "openai null code uses type",
			status: 400,
			body:   `{"error":{"message":"bad","type":"invalid_request_error","code":null}}`,
			want:   &HTTPError{StatusCode: 400, Code: "invalid_request_error", Message: "bad"},
		},
		{
			name:   "openai number code",
			status: 500,
			body:   `{"error":{"message":"oops","type":"server_error","code":500}}`,
			want:   &HTTPError{StatusCode: 500, Code: "500", Message: "oops"},
		},
		{
			name:   "anthropic",
			status: 529,
			body:   `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`,
			want:   &HTTPError{StatusCode: 529, Code: "overloaded_error", Message: "Overloaded"},
		},
		{
			name:   "error string",
			status: 404,
			body:   `{"error":"model 'x' not found"}`,
			want:   &HTTPError{StatusCode: 404, Message: "model 'x' not found"},
		},
		{
			name:   "top-level message and code",
			status: 400,
			body:   `{"message":"bad input","code":"E1"}`,
			want:   &HTTPError{StatusCode: 400, Code: "E1", Message: "bad input"},
		},
		{
			name:   "detail",
			status: 422,
			body:   `{"detail":"Not Found"}`,
			want:   &HTTPError{StatusCode: 422, Message: "Not Found"},
		},
		{
			name:   "unknown json falls back to body",
			status: 502,
			body:   ` {"weird":true} `,
			want:   &HTTPError{StatusCode: 502, Message: `{"weird":true}`},
		},
		{
			name:   "plain text",
			status: 503,
			header: map[string]string{"retry-after": "5"},
			body:   "\n upstream connect error \n",
			want:   &HTTPError{StatusCode: 503, Message: "upstream connect error", RetryAfter: 5 * time.Second},
		},
		{
			name:   "empty body",
			status: 500,
			want:   &HTTPError{StatusCode: 500},
		},
		{
			name:   "long message truncated to 500 characters",
			status: 400,
			body:   `{"error":{"message":"` + long + `"}}`,
			want:   &HTTPError{StatusCode: 400, Message: strings.Repeat("é", 499) + "…"},
		},
		{
			name:   "key redacted in json",
			status: 401,
			body:   `{"error":{"message":"Incorrect API key provided: ` + key + `.","type":"invalid_request_error","code":"invalid_api_key"}}`,
			want:   &HTTPError{StatusCode: 401, Code: "invalid_api_key", Message: "Incorrect API key provided: [REDACTED]."},
		},
		{
			name:   "key redacted in raw body",
			status: 401,
			body:   "denied for Bearer " + key,
			want:   &HTTPError{StatusCode: 401, Message: "denied for Bearer [REDACTED]"},
		},
		{
			name:   "key at the truncation limit is redacted before the cut",
			status: 401,
			body:   strings.Repeat("x", 495) + key,
			want:   &HTTPError{StatusCode: 401, Message: strings.Repeat("x", 495) + "[RED…"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := &http.Response{StatusCode: tt.status, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(tt.body))}
			for k, v := range tt.header {
				resp.Header.Set(k, v)
			}
			got := ErrorFromResponse(resp, key)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ErrorFromResponse mismatch (-want +got):\n%s", diff)
			}
			if strings.Contains(got.Error(), key[:8]) {
				t.Errorf("error %q contains part of the key", got.Error())
			}
		})
	}
}

func TestErrorFromResponseReadsAtMost64KiB(t *testing.T) {
	r := &countingReader{r: strings.NewReader(strings.Repeat("a", 1<<20))}
	resp := &http.Response{StatusCode: 500, Header: http.Header{}, Body: io.NopCloser(r)}
	e := ErrorFromResponse(resp)
	if r.n > 64<<10 {
		t.Errorf("read %d bytes, want at most %d", r.n, 64<<10)
	}
	if n := utf8.RuneCountInString(e.Message); n != 500 {
		t.Errorf("message has %d characters, want 500", n)
	}
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func TestTruncate(t *testing.T) {
	tests := []struct {
		s    string
		n    int
		want string
	}{
		{s: "", n: 3, want: ""},
		{s: "abc", n: 3, want: "abc"},
		{s: "abcd", n: 3, want: "ab…"},
		{s: "日本語です", n: 4, want: "日本語…"},
	}
	for _, tt := range tests {
		if got := truncate(tt.s, tt.n); got != tt.want {
			t.Errorf("truncate(%q, %d) = %q, want %q", tt.s, tt.n, got, tt.want)
		}
	}
}

// echoServer answers {"echo": <request body>} and records request headers.
func echoServer(t *testing.T) (*httptest.Server, *atomic.Pointer[http.Header]) {
	t.Helper()
	var last atomic.Pointer[http.Header]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Clone()
		last.Store(&h)
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"echo":%s}`, b)
	}))
	t.Cleanup(srv.Close)
	return srv, &last
}

func TestPostJSON(t *testing.T) {
	srv, last := echoServer(t)
	header := http.Header{"X-Test": {"1"}}
	in := map[string]string{"q": "<a & b>"}
	var out struct {
		Echo map[string]string `json:"echo"`
	}
	if err := PostJSON(context.Background(), srv.Client(), srv.URL, header, in, &out); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(in, out.Echo); diff != "" {
		t.Errorf("echo mismatch (-want +got):\n%s", diff)
	}
	got := *last.Load()
	if ct := got.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	if got.Get("X-Test") != "1" {
		t.Errorf("X-Test header not sent")
	}
	if diff := cmp.Diff(http.Header{"X-Test": {"1"}}, header); diff != "" {
		t.Errorf("caller's header was modified (-want +got):\n%s", diff)
	}
}

// TestPostJSONConcurrentBodies checks that pooled request buffers are never
// shared by two requests in flight (run with -race).
func TestPostJSONConcurrentBodies(t *testing.T) {
	srv, _ := echoServer(t)
	client := NewHTTPClient(8)
	var wg sync.WaitGroup
	errs := make(chan error, 400)
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				// Vary the size so buffers of different capacities are recycled.
				in := map[string]string{"id": fmt.Sprintf("%d-%d", g, i), "pad": strings.Repeat("x", (g*50+i)%7*1000)}
				var out struct {
					Echo map[string]string `json:"echo"`
				}
				if err := PostJSON(context.Background(), client, srv.URL, nil, in, &out); err != nil {
					errs <- err
					return
				}
				if !cmp.Equal(in, out.Echo) {
					errs <- fmt.Errorf("sent id %s, server saw id %s", in["id"], out.Echo["id"])
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestPostJSONErrors(t *testing.T) {
	const key = "sk-secret-key-1234"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/status":
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprintf(w, `{"error":{"message":"slow down %s","type":"rate_limit"}}`, key)
		case "/badjson":
			fmt.Fprint(w, `{"a":`)
		}
	}))
	defer srv.Close()

	var out map[string]any
	err := PostJSON(context.Background(), srv.Client(), srv.URL+"/status", nil, 1, &out, key)
	h, ok := AsHTTPError(err)
	if !ok {
		t.Fatalf("err = %v, want *HTTPError", err)
	}
	want := &HTTPError{StatusCode: 429, Code: "rate_limit", Message: "slow down [REDACTED]", RetryAfter: 2 * time.Second}
	if diff := cmp.Diff(want, h); diff != "" {
		t.Errorf("HTTPError mismatch (-want +got):\n%s", diff)
	}

	err = PostJSON(context.Background(), srv.Client(), srv.URL+"/badjson", nil, 1, &out)
	if err == nil {
		t.Fatal("malformed JSON: got nil error")
	}
	if _, ok := AsHTTPError(err); ok {
		t.Errorf("malformed JSON: got *HTTPError %v, want a decoding error", err)
	}

	// An answer past the cap is a final error naming the cap, read no further.
	var sent atomic.Int64
	huge := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"text":"`)
		chunk := bytes.Repeat([]byte("a"), 1<<20)
		for range 200 { // 200 MiB, as in the trial
			n, err := w.Write(chunk)
			sent.Add(int64(n))
			if err != nil {
				return
			}
		}
		fmt.Fprint(w, `"}`)
	}))
	defer huge.Close()
	err = PostJSON(context.Background(), huge.Client(), huge.URL, nil, 1, &out)
	if !errors.Is(err, ErrResponseTooLarge) || !strings.Contains(err.Error(), "larger than 16 MiB") {
		t.Errorf("200 MiB answer: err = %v, want ErrResponseTooLarge", err)
	}
	huge.CloseClientConnections()
	if n := sent.Load(); n > 64<<20 {
		t.Errorf("the server could send %d MiB before the client gave up; want it cut near the cap", n>>20)
	}
	// Exactly at the cap is still fine.
	exact := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := append([]byte(`{"text":"`), bytes.Repeat([]byte("a"), MaxResponseBytes-len(`{"text":""}`))...)
		w.Write(append(body, `"}`...))
	}))
	defer exact.Close()
	var got struct{ Text string }
	if err := PostJSON(context.Background(), exact.Client(), exact.URL, nil, 1, &got); err != nil || len(got.Text) != MaxResponseBytes-len(`{"text":""}`) {
		t.Errorf("answer of exactly the cap: err = %v, text of %d bytes", err, len(got.Text))
	}

	err = PostJSON(context.Background(), srv.Client(), srv.URL, nil, func() {}, &out)
	if err == nil || !strings.Contains(err.Error(), "encoding request") {
		t.Errorf("unencodable input: err = %v, want an encoding error", err)
	}
}

func TestPostJSONContext(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/midbody" {
			// Send headers and part of the body, then stall.
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(200)
			fmt.Fprint(w, `{"echo":`)
			w.(http.Flusher).Flush()
		}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)

	errCause := errors.New("run aborted")
	tests := []struct {
		name string
		path string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{
			name: "deadline while waiting for headers",
			ctx: func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), 50*time.Millisecond)
			},
			want: context.DeadlineExceeded,
		},
		{
			name: "deadline while reading the body",
			path: "/midbody",
			ctx: func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), 50*time.Millisecond)
			},
			want: context.DeadlineExceeded,
		},
		{
			name: "canceled with a cause",
			ctx: func() (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancelCause(context.Background())
				time.AfterFunc(30*time.Millisecond, func() { cancel(errCause) })
				return ctx, func() { cancel(nil) }
			},
			want: context.Canceled,
		},
		{
			name: "canceled before the call",
			ctx: func() (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				return ctx, cancel
			},
			want: context.Canceled,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := tt.ctx()
			defer cancel()
			var out map[string]any
			err := PostJSON(ctx, srv.Client(), srv.URL+tt.path, nil, 1, &out)
			if !errors.Is(err, tt.want) {
				t.Errorf("err = %v, want errors.Is(err, %v)", err, tt.want)
			}
			if _, ok := AsHTTPError(err); ok {
				t.Errorf("err = %v is an *HTTPError", err)
			}
		})
	}
}

// TestPostJSONReusesConnections checks that bodies are drained and closed, on
// success and on error, including JSON followed by trailing bytes.
func TestPostJSONReusesConnections(t *testing.T) {
	for _, status := range []int{200, 429} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(status)
				fmt.Fprint(w, `{"ok":true}`+"\n\n"+strings.Repeat(" ", 5000))
			}))
			var conns atomic.Int32
			srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew {
					conns.Add(1)
				}
			}
			srv.Start()
			defer srv.Close()
			client := NewHTTPClient(2)
			for range 50 {
				var out map[string]any
				err := PostJSON(context.Background(), client, srv.URL, nil, 1, &out)
				if status == 200 && err != nil {
					t.Fatal(err)
				}
			}
			if n := conns.Load(); n != 1 {
				t.Errorf("opened %d connections for 50 sequential calls, want 1", n)
			}
		})
	}
}

func TestEncodeJSON(t *testing.T) {
	a, err := encodeJSON(map[string]string{"q": "<a & b>"})
	if err != nil {
		t.Fatal(err)
	}
	// The result must not share memory with the pooled buffer.
	b, err := encodeJSON(map[string]string{"q": "zzzzzzz"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(a), `{"q":"<a & b>"}`+"\n"; got != want {
		t.Errorf("first encoding = %q, want %q (unescaped HTML, not overwritten)", got, want)
	}
	if got, want := string(b), `{"q":"zzzzzzz"}`+"\n"; got != want {
		t.Errorf("second encoding = %q, want %q", got, want)
	}
}

func TestParseErrorBodyIgnoresNonScalars(t *testing.T) {
	msg, code := parseErrorBody([]byte(`{"error":{"message":["a"],"type":{"x":1},"code":true}}`))
	if msg != "" || code != "" {
		t.Errorf("got (%q, %q), want empty", msg, code)
	}
	if msg, _ := parseErrorBody([]byte(`{"detail":[{"msg":"x"}]}`)); msg != "" {
		t.Errorf("list detail: got %q, want empty (the raw body is used instead)", msg)
	}
}

// TestNoRedirects: a redirect is reported, not followed: following it would
// send the request and its credentials (x-api-key survives Go's cross-host
// redirect rules) to another host, or turn the POST into a GET.
func TestNoRedirects(t *testing.T) {
	var elsewhere atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		fmt.Fprint(w, `{"ok":true}`)
	}))
	defer other.Close()
	// The same server under another host name, as a cross-host redirect.
	target := strings.Replace(other.URL, "127.0.0.1", "localhost", 1) + "/v1/messages"
	for _, code := range []int{301, 302, 307, 308} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, target, code)
			}))
			defer srv.Close()
			h := JSONHeaders(map[string]string{"X-Api-Key": "sk-secret"}, nil)
			var out map[string]any
			err := PostJSON(context.Background(), NewHTTPClient(4), srv.URL+"/v1/messages", h, map[string]string{"q": "x"}, &out, "sk-secret")
			he, ok := AsHTTPError(err)
			if !ok || he.StatusCode != code || !strings.Contains(he.Message, target) || !strings.Contains(he.Message, "baseURL") {
				t.Errorf("err = %v, want an HTTP %d error naming %s and baseURL", err, code, target)
			}
		})
	}
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("the redirect target got %d requests, want none", n)
	}
}
