package runner

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/ratelimit"
	"github.com/proctor-dev/proctor/runner/results"
	"github.com/proctor-dev/proctor/runner/spend"
)

// AgentEndpoint is a ModelEndpoint that an agent model's agent calls by
// itself. While the model runs, the engine serves a proxy for it on the
// loopback: the agent is given the proxy's address and a placeholder key of
// its sample's own, and the proxy calls the endpoint with the real key,
// within the endpoint's limits, retrying as the engine's own calls do, and
// counting the calls and tokens into the sample's record.
type AgentEndpoint struct {
	// Endpoint is the ModelEndpoint's name.
	Endpoint string
	// Caller is the name its calls go by in the engine (SetLimits, Pause,
	// Usage, Throttle) and in the endpoint's budget.
	Caller string
	// Anthropic: the key travels in x-api-key; otherwise as a bearer token.
	Anthropic bool
	// BaseURL is the endpoint's API root: the proxy forwards requests under
	// its path to its host.
	BaseURL *url.URL
	// APIKey is the endpoint's key; "" for a server that needs none.
	APIKey string
	// Headers are the endpoint's extra headers, sent on every call.
	Headers map[string]string
	// BaseURLEnv and APIKeyEnv are the agent's variables for the proxy's
	// address and the placeholder key.
	BaseURLEnv, APIKeyEnv string
	// Limits are the calls' own limits: in a cluster, their share of the
	// endpoint's budget, set while they run; none in a local run, where the
	// endpoint's limiter (Plan.Endpoints) paces them with its other callers.
	Limits ratelimit.Limits
	// Weight weighs the calls' part of the endpoint's limits in a local run.
	Weight int64
	// HTTPClient calls the endpoint; nil means one made for it.
	HTTPClient *http.Client
	// Prices are the endpoint's prices by model id (ModelEndpoint
	// spec.pricing): a call asking for a model listed there costs its price;
	// the agent model's Price prices the others.
	Prices map[string]*spend.Price
}

const (
	// maxProxyBody bounds what the proxy reads of an agent's request.
	maxProxyBody = 32 << 20
	// maxRelayedError bounds what it keeps of an error answer to relay.
	maxRelayedError = 1 << 20
	// maxUsageScan bounds how much of a JSON (not streamed) answer is kept to
	// read its usage from.
	maxUsageScan = 16 << 20
	// agentCallWindow is how many calls per agent in flight an agent
	// endpoint's window starts with (agents may call in parallel).
	agentCallWindow = 4
)

// agentProxies are an agent model's proxies and its samples' sessions.
type agentProxies struct {
	proxies []*agentProxy
	mu      sync.Mutex
	// sessions maps a sample's placeholder key to its session.
	sessions map[string]*agentSession
	// priced: an endpoint prices some models (AgentEndpoint.Prices).
	priced bool
}

// agentProxy serves one agent endpoint while its model runs.
type agentProxy struct {
	ep  *AgentEndpoint
	run *modelRun // the calls' window, gate, limits and usage
	// base is the agent's base URL (the proxy's address and the endpoint's
	// path), once listening.
	base string
}

// agentSession is one sample's use of its model's proxies.
type agentSession struct {
	owner *agentProxies
	key   string
	env   []string

	mu       sync.Mutex
	calls    int64
	in, out  int64
	charge   spend.Totals
	unpriced bool                  // a call's model had no price
	lost     error                 // why a call could not be made that was not the agent's doing
	log      []results.ProxiedCall // the first calls, one by one
	finished bool
	// parent is the span the agent's proxied calls go below: its sample's
	// attempt running the agent.
	parent trace.SpanContext
	// active counts the calls being served; drained is closed when the last
	// ends after close began waiting.
	active  int
	drained chan struct{}
}

func (s *agentSession) setParent(sc trace.SpanContext) {
	s.mu.Lock()
	s.parent = sc
	s.mu.Unlock()
}

func (s *agentSession) parentSpan() trace.SpanContext {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.parent
}

// sessionDrain bounds how long a finished sample waits for its calls still
// being served to end (their agent is gone, so they end as soon as the
// proxy notices).
const sessionDrain = 5 * time.Second

// open starts a sample's session: its placeholder key and the agent's
// variables.
func (a *agentProxies) open() *agentSession {
	var b [24]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	s := &agentSession{owner: a, key: "proctor-agent-" + hex.EncodeToString(b[:])}
	for _, p := range a.proxies {
		s.env = append(s.env, p.ep.BaseURLEnv+"="+p.base, p.ep.APIKeyEnv+"="+s.key)
	}
	a.mu.Lock()
	a.sessions[s.key] = s
	a.mu.Unlock()
	return s
}

// close ends the session: its key is refused from now on. It waits (a
// little) for the calls still being served, so that the sample's outcome
// counts them, and knows whether one was cut short waiting.
func (s *agentSession) close() {
	s.owner.mu.Lock()
	delete(s.owner.sessions, s.key)
	s.owner.mu.Unlock()
	s.mu.Lock()
	s.finished = true
	var wait chan struct{}
	if s.active > 0 {
		s.drained = make(chan struct{})
		wait = s.drained
	}
	s.mu.Unlock()
	if wait != nil {
		select {
		case <-wait:
		case <-time.After(sessionDrain):
		}
	}
}

// enter starts serving a call of the session, unless it is finished.
func (s *agentSession) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.finished {
		return false
	}
	s.active++
	return true
}

// exit ends serving a call.
func (s *agentSession) exit() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.active--
	if s.active == 0 && s.drained != nil {
		close(s.drained)
		s.drained = nil
	}
}

func (a *agentProxies) session(key string) *agentSession {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.sessions[key]
}

// counted adds a call, what it used and what it cost (unknown when it had
// no price).
func (s *agentSession) counted(u provider.Usage, charge spend.Totals, priced bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// An error answer costs nothing, priced or not.
	s.unpriced = s.unpriced || (!priced && charge != spend.Totals{})
	s.calls++
	s.in += u.InputTokens
	s.out += u.OutputTokens
	s.charge = s.charge.Add(charge)
}

// logged keeps a call's account, among the first results.MaxProxiedCalls.
func (s *agentSession) logged(c results.ProxiedCall) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.log) < results.MaxProxiedCalls {
		s.log = append(s.log, c)
	}
}

// lose records that a call failed for a reason that is not the agent's (its
// endpoint's quota did not recover, the run is stopping): the sample's
// outcome then says nothing about the agent, and it leaves no record.
func (s *agentSession) lose(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lost == nil {
		s.lost = err
	}
}

func (s *agentSession) result() (calls, in, out int64, charge spend.Totals, unpriced bool, log []results.ProxiedCall, lost error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls, s.in, s.out, s.charge, s.unpriced, slices.Clone(s.log), s.lost
}

// settleAgent closes an agent's session once its run (res) ended and counts
// its proxied calls into res and rec: the proxies saw every call, so what
// the agent reports of them would count them twice. It returns whether a
// call was of a model nothing prices, and, when the agent failed while its
// endpoint could not be called (the run stopping, a quota that did not
// recover), that cause: not the agent's doing, so the sample leaves no record
// (and the model ends with the quota, as its calls would).
func settleAgent(sess *agentSession, res *callResult, rec *results.Record) (unpriced bool, lost error) {
	sess.close()
	calls, in, out, charge, unpriced, log, lost := sess.result()
	if lost != nil && res.err != nil && !res.cached {
		return unpriced, lost
	}
	if res.err == nil && !res.cached {
		res.resp.Usage = provider.Usage{InputTokens: in, OutputTokens: out}
		res.resp.ReportedCost = nil
	}
	res.charge = res.charge.Add(charge)
	rec.AgentCalls, rec.ProxiedCalls = calls, log
	return unpriced, nil
}

// startProxies listens for m's agent endpoints on the loopback and serves
// them until the returned stop is called.
func (e *Engine) startProxies(m *modelRun) (stop func(), err error) {
	a := m.proxies
	var servers []*http.Server
	stop = func() {
		for _, s := range servers {
			_ = s.Close()
		}
	}
	for _, p := range a.proxies {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			stop()
			return nil, fmt.Errorf("agent endpoint %s: serving its proxy: %w", p.ep.Endpoint, err)
		}
		p.base = "http://" + ln.Addr().String() + strings.TrimSuffix(p.ep.BaseURL.Path, "/")
		srv := &http.Server{Handler: e.proxyHandler(a, p), ReadHeaderTimeout: 30 * time.Second}
		servers = append(servers, srv)
		go func() { _ = srv.Serve(ln) }()
		e.log.V(1).Info("Serving an agent endpoint's proxy", "model", m.Name, "endpoint", p.ep.Endpoint, "address", ln.Addr().String())
	}
	return stop, nil
}

// forwardKey holds, in a proxied call's context, the agent's request.
type forwardKey struct{}

// forwardCall is an agent's request on its way to the endpoint.
type forwardCall struct {
	r    *http.Request
	body []byte
	// model is the model id the request asks for ("" when it names none).
	model string
	w     http.ResponseWriter
	// sent says the request went to the endpoint at least once.
	sent bool
	// wrote says the answer has begun (a 2xx, streamed as it comes), with
	// status.
	wrote  bool
	status int
	// failed is the last error answer, relayed when the call gives up.
	failed *relayedAnswer
}

// requestedModel is the model an OpenAI or Anthropic request body asks for.
func requestedModel(body []byte) string {
	var r struct {
		Model string `json:"model"`
	}
	if json.Unmarshal(body, &r) != nil {
		return ""
	}
	return r.Model
}

type relayedAnswer struct {
	status int
	header http.Header
	body   []byte
}

// proxyHandler serves an agent's calls to p's endpoint: known placeholder
// keys only, paths under the endpoint's only; each call goes through the
// engine's window, gate, limits and retries of the endpoint's calls.
func (e *Engine) proxyHandler(a *agentProxies, p *agentProxy) http.Handler {
	prefix := strings.TrimSuffix(p.ep.BaseURL.Path, "/")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := a.session(placeholderKey(r.Header))
		if s == nil || !s.enter() {
			proxyError(w, http.StatusUnauthorized, "authentication_error",
				"this is Proctor's proxy for a ModelEndpoint: use the key Proctor gave the agent, while its sample runs")
			return
		}
		defer s.exit()
		if prefix != "" && r.URL.Path != prefix && !strings.HasPrefix(r.URL.Path, prefix+"/") {
			proxyError(w, http.StatusNotFound, "not_found_error", fmt.Sprintf("the proxy serves only paths under %s", prefix))
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, maxProxyBody+1))
		if err != nil {
			proxyError(w, http.StatusBadRequest, "invalid_request_error", "reading the request: "+err.Error())
			return
		}
		if len(body) > maxProxyBody {
			proxyError(w, http.StatusRequestEntityTooLarge, "invalid_request_error", fmt.Sprintf("the request is larger than %d bytes", maxProxyBody))
			return
		}
		fc := &forwardCall{r: r, body: body, w: w, model: requestedModel(body)}
		ctx, span := e.startProxied(r.Context(), s, p, r, fc.model)
		ctx = context.WithValue(ctx, forwardKey{}, fc)
		priced := p.run.priceOf(ctx) != nil
		start := e.clock.Now()
		res := e.call(ctx, p.run, &provider.Request{})
		// The call's account, for the sample's record: status and error
		// are set below, as the agent is answered.
		logged := results.ProxiedCall{Endpoint: p.ep.Endpoint, Model: fc.model, Path: r.URL.Path, Attempts: res.attempts,
			StartedAt: start.UTC().Truncate(time.Millisecond), LatencyMillis: e.clock.Since(start).Milliseconds()}
		if priced {
			c := res.charge.Cost.Dollars()
			logged.Cost = &c
		}
		defer func() {
			if logged.Error != "" {
				logged.Error = results.CutUTF8(e.redact(logged.Error), results.MaxProxiedCallError)
			}
			s.logged(logged)
			endProxied(span, logged)
		}()
		switch {
		case res.err == nil:
			s.counted(res.resp.Usage, res.charge, priced)
			logged.Status, logged.InputTokens, logged.OutputTokens = fc.status, res.resp.Usage.InputTokens, res.resp.Usage.OutputTokens
			return
		case fc.wrote:
			// The answer broke off mid-stream: the agent sees it end.
			s.counted(provider.Usage{}, res.charge, priced)
			logged.Status, logged.Error = fc.status, res.err.Error()
			return
		case r.Context().Err() != nil:
			if !fc.sent {
				// It gave up while its call waited for the endpoint's
				// pace or share: not the agent's doing.
				s.lose(errGaveUpWaiting)
			}
			logged.Error = "the agent went away before its answer"
			return // the agent went away
		case errors.Is(res.err, errStopping) || isThrottledOut(res.err) || provider.IsUnavailable(res.err) || IsBudgetExceeded(res.err):
			s.lose(res.err)
			logged.Status, logged.Error = http.StatusServiceUnavailable, res.err.Error()
			proxyError(w, http.StatusServiceUnavailable, "api_error", e.redact(res.err.Error()))
			return
		}
		s.counted(provider.Usage{}, res.charge, priced)
		logged.Error = res.err.Error()
		if f := fc.failed; f != nil {
			logged.Status = f.status
			relay(w, f.status, f.header, f.body)
			return
		}
		logged.Status = http.StatusBadGateway
		proxyError(w, http.StatusBadGateway, "api_error", e.redact(res.err.Error()))
	})
}

// errGaveUpWaiting is an agent that went away while its call still waited to
// be sent (for the endpoint's pace, its share, or the endpoint to be back).
var errGaveUpWaiting = errors.New("the agent gave up while its call waited for the endpoint")

// providerName is the GenAI conventions' name of the endpoint's API.
func (a *AgentEndpoint) providerName() string {
	if a.Anthropic {
		return "anthropic"
	}
	return "openai"
}

// placeholderKey is the key an agent sent, as OpenAI's and Anthropic's
// clients send theirs.
func placeholderKey(h http.Header) string {
	if k := h.Get("X-Api-Key"); k != "" {
		return k
	}
	auth := h.Get("Authorization")
	if len(auth) > 7 && strings.EqualFold(auth[:7], "bearer ") {
		return strings.TrimSpace(auth[7:])
	}
	return ""
}

// proxyError answers with an error in the shape both providers' clients read.
func proxyError(w http.ResponseWriter, status int, kind, msg string) {
	b, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]string{"type": kind, "message": msg}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// hopHeaders are connection-level headers a proxy does not pass on.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func relay(w http.ResponseWriter, status int, header http.Header, body []byte) {
	copyHeader(w.Header(), header)
	w.Header().Del("Content-Length")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func copyHeader(dst, src http.Header) {
	for k, vs := range src {
		dst[k] = append([]string(nil), vs...)
	}
	for _, h := range hopHeaders {
		dst.Del(h)
	}
}

// forwarder is the provider of an agent endpoint's calls: it sends the
// agent's request on to the endpoint with the real key, and streams a 2xx
// answer back as it comes while reading its usage.
type forwarder struct {
	ep     *AgentEndpoint
	client *http.Client
}

func newForwarder(ep *AgentEndpoint, conns int) *forwarder {
	c := ep.HTTPClient
	if c == nil {
		c = provider.NewHTTPClient(conns)
	}
	return &forwarder{ep: ep, client: c}
}

// Complete forwards the call in ctx (forwardKey). A non-2xx answer is kept
// for relaying and returned as an *provider.HTTPError, for the engine's
// retries; a 2xx one is written to the agent at once.
func (f *forwarder) Complete(ctx context.Context, _ *provider.Request) (*provider.Response, error) {
	fc, ok := ctx.Value(forwardKey{}).(*forwardCall)
	if !ok {
		return nil, errors.New("an agent endpoint's call without its request")
	}
	fc.failed = nil // an earlier attempt's answer is not this one's
	fc.sent = true
	u := *f.ep.BaseURL
	u.Path, u.RawPath = fc.r.URL.Path, fc.r.URL.RawPath
	u.RawQuery = fc.r.URL.RawQuery
	req, err := http.NewRequestWithContext(ctx, fc.r.Method, u.String(), bytes.NewReader(fc.body))
	if err != nil {
		return nil, err
	}
	copyHeader(req.Header, fc.r.Header)
	// The placeholder goes; the key comes. Compression is the transport's.
	for _, h := range []string{"Authorization", "X-Api-Key", "Accept-Encoding", "Content-Length", "Host"} {
		req.Header.Del(h)
	}
	if k := f.ep.APIKey; k != "" {
		if f.ep.Anthropic {
			req.Header.Set("X-Api-Key", k)
		} else {
			req.Header.Set("Authorization", "Bearer "+k)
		}
	}
	for k, v := range f.ep.Headers {
		req.Header.Set(k, v)
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	provider.ObserveRateLimits(ctx, resp.Header)
	if resp.StatusCode/100 != 2 {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxRelayedError))
		fc.failed = &relayedAnswer{status: resp.StatusCode, header: resp.Header.Clone(), body: raw}
		resp.Body = io.NopCloser(bytes.NewReader(raw))
		return nil, provider.ErrorFromResponse(resp, f.ep.APIKey)
	}
	fc.wrote, fc.status = true, resp.StatusCode
	copyHeader(fc.w.Header(), resp.Header)
	fc.w.Header().Del("Content-Length")
	fc.w.WriteHeader(resp.StatusCode)
	scan := newUsageScanner(strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream"))
	flusher, _ := fc.w.(http.Flusher)
	buf := make([]byte, 32<<10)
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			scan.write(buf[:n])
			if _, werr := fc.w.Write(buf[:n]); werr != nil {
				return nil, &brokenAnswer{what: "relaying the answer to the agent", err: werr}
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return nil, &brokenAnswer{what: "reading the endpoint's answer", err: rerr}
		}
	}
	return &provider.Response{Usage: scan.usage()}, nil
}

// brokenAnswer is a 2xx answer that broke off once begun. It does not unwrap
// to the network error beneath, so that the engine never retries it: the
// agent has part of the answer, and the call was paid for.
type brokenAnswer struct {
	what string
	err  error
}

func (e *brokenAnswer) Error() string { return e.what + ": " + e.err.Error() }

// usageScanner reads the token usage of an answer as it passes: the "usage"
// of a JSON answer, or the largest of each count in a stream's events
// (OpenAI's last chunk, when asked for; Anthropic's message_start and
// message_delta; the Responses API's response.completed).
type usageScanner struct {
	stream  bool
	buf     bytes.Buffer
	in, out int64
	over    bool
}

func newUsageScanner(stream bool) *usageScanner { return &usageScanner{stream: stream} }

func (u *usageScanner) write(p []byte) {
	if u.over {
		return
	}
	u.buf.Write(p)
	if !u.stream {
		if u.buf.Len() > maxUsageScan {
			u.over = true
			u.buf = bytes.Buffer{}
		}
		return
	}
	// Whole lines only; the rest waits for the next write.
	for {
		line, err := u.buf.ReadBytes('\n')
		if err != nil {
			u.buf = *bytes.NewBuffer(line)
			if u.buf.Len() > maxUsageScan {
				u.over = true
				u.buf = bytes.Buffer{}
			}
			return
		}
		u.event(line)
	}
}

func (u *usageScanner) event(line []byte) {
	data, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("data:"))
	if !ok {
		return
	}
	u.fold(bytes.TrimSpace(data))
}

// usageFields are where the providers put token counts.
type usageFields struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	InputTokens      int64 `json:"input_tokens"`
	OutputTokens     int64 `json:"output_tokens"`
}

func (u *usageScanner) fold(doc []byte) {
	if len(doc) == 0 || doc[0] != '{' {
		return
	}
	var v struct {
		Usage    *usageFields                  `json:"usage"`
		Message  *struct{ Usage *usageFields } `json:"message"`
		Response *struct{ Usage *usageFields } `json:"response"`
	}
	if json.Unmarshal(doc, &v) != nil {
		return
	}
	for _, f := range []*usageFields{v.Usage, usageOf(v.Message), usageOf(v.Response)} {
		if f == nil {
			continue
		}
		u.in = max(u.in, f.PromptTokens, f.InputTokens)
		u.out = max(u.out, f.CompletionTokens, f.OutputTokens)
	}
}

func usageOf(v *struct{ Usage *usageFields }) *usageFields {
	if v == nil {
		return nil
	}
	return v.Usage
}

func (u *usageScanner) usage() provider.Usage {
	if !u.over {
		if u.stream {
			if rest := u.buf.Bytes(); len(rest) > 0 {
				u.event(rest)
			}
		} else {
			u.fold(bytes.TrimSpace(u.buf.Bytes()))
		}
	}
	return provider.Usage{InputTokens: u.in, OutputTokens: u.out}
}

// proxiedInput estimates an agent's request's input tokens from its size:
// the estimator corrects the ratio from what the endpoint reports.
func proxiedInput(ctx context.Context) (int64, bool) {
	fc, ok := ctx.Value(forwardKey{}).(*forwardCall)
	if !ok {
		return 0, false
	}
	return int64(len(fc.body)/4) + 1, true
}
