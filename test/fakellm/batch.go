package fakellm

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The batch APIs, as the providers document them:
//
//   - OpenAI: POST /v1/files (multipart, purpose "batch": a JSONL file of
//     {"custom_id", "method": "POST", "url": "/v1/chat/completions", "body"}),
//     POST /v1/batches (input_file_id, endpoint, completion_window, metadata),
//     GET /v1/batches/{id}, GET /v1/batches (newest first, limit and after),
//     POST /v1/batches/{id}/cancel, GET /v1/files/{id}/content (the output
//     and error files: {"id", "custom_id", "response": {"status_code",
//     "body"}, "error"} lines).
//   - Anthropic: POST /v1/messages/batches ({"requests": [{"custom_id",
//     "params"}]}), GET /v1/messages/batches/{id}, GET /v1/messages/batches
//     (newest first, limit and after_id), POST .../{id}/cancel, GET
//     .../{id}/results ({"custom_id", "result": {"type": "succeeded",
//     "message"} | {"type": "errored", "error"} | {"type": "expired"} |
//     {"type": "canceled"}} lines).
//
// A batch is processed Config.BatchDelay after it was created, when it is
// next looked at: each request is answered as the synchronous API would
// answer it, or fails (Config.BatchFailureRate) or expires
// (Config.BatchExpireRate). Results come in an order that is not the
// submission's. The server counts what it was given (Stats.Batches,
// BatchRequests) and the requests submitted again while an earlier
// submission of the same custom_id was pending or had succeeded
// (Stats.DuplicateBatchRequests): a client that resubmits after a crash
// shows there.

// Batch limits, as documented.
const (
	openAIBatchMaxRequests    = 50000
	openAIBatchMaxBytes       = 200 << 20
	anthropicBatchMaxRequests = 100000
	anthropicBatchMaxBytes    = 256 << 20
)

var anthropicCustomID = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// batchRequest is one request of a batch.
type batchRequest struct {
	customID string
	body     []byte
}

// batchResult is one request's outcome.
type batchResult struct {
	customID string
	// status 200 with body; else an error (errType, message); expired or
	// canceled when it was not processed.
	status   int
	body     json.RawMessage
	errType  string
	message  string
	expired  bool
	canceled bool
}

type batch struct {
	id       string
	api      string // APIOpenAI or APIAnthropic
	created  time.Time
	ready    time.Time
	requests []batchRequest
	metadata map[string]string
	inputID  string
	window   string
	// ended: processed (or cancelled); results are in results, in the order
	// they are served.
	ended     bool
	cancelled bool
	endedAt   time.Time
	// cancelling: a cancel was asked for at cancelAsked; it takes effect
	// Config.BatchCancelDelay later, as providers' cancellations take time
	// ("cancelling", "canceling") during which requests may still finish.
	cancelling  bool
	cancelAsked time.Time
	results     []batchResult
	outputFile  string
	errorFile   string
	// failure, when set, failed the whole batch at validation (OpenAI).
	failure *apiError
}

// batches is the server's batch state.
type batches struct {
	mu    sync.Mutex
	files map[string][]byte
	list  []*batch // by creation
	byID  map[string]*batch
	// customIDs holds each custom_id's latest submission (by API): pending,
	// ok or failed.
	customIDs map[string]string

	// Counters, read by Stats under mu.
	created, requests, duplicates, cancelled, cancelRequests int64
	maxInProgress                                            int64
	inputTokens, outputTokens                                int64
}

func (s *Server) batchState() *batches {
	s.batchOnce.Do(func() {
		s.batch = &batches{files: map[string][]byte{}, byID: map[string]*batch{}, customIDs: map[string]string{}}
	})
	return s.batch
}

// SetBatchDelay changes Config.BatchDelay for the batches created from now on.
func (s *Server) SetBatchDelay(d time.Duration) {
	b := s.batchState()
	b.mu.Lock()
	defer b.mu.Unlock()
	s.cfg.BatchDelay = d
}

func (s *Server) registerBatchRoutes(mux *http.ServeMux) {
	auth := func(d dialect, h func(http.ResponseWriter, *http.Request)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if len(s.key) > 0 && !s.authorized(r.Header) {
				d.writeError(w, apiError{status: http.StatusUnauthorized, message: "invalid or missing API key"})
				return
			}
			h(w, r)
		}
	}
	mux.HandleFunc("POST /v1/files", auth(openAI{}, s.uploadFile))
	mux.HandleFunc("GET /v1/files/{id}/content", auth(openAI{}, s.fileContent))
	mux.HandleFunc("POST /v1/batches", auth(openAI{}, s.createOpenAIBatch))
	mux.HandleFunc("GET /v1/batches", auth(openAI{}, func(w http.ResponseWriter, r *http.Request) { s.listBatches(w, r, APIOpenAI) }))
	mux.HandleFunc("GET /v1/batches/{id}", auth(openAI{}, func(w http.ResponseWriter, r *http.Request) { s.getBatch(w, r, APIOpenAI, false) }))
	mux.HandleFunc("POST /v1/batches/{id}/cancel", auth(openAI{}, func(w http.ResponseWriter, r *http.Request) { s.getBatch(w, r, APIOpenAI, true) }))
	mux.HandleFunc("POST /v1/messages/batches", auth(anthropic{}, s.createAnthropicBatch))
	mux.HandleFunc("GET /v1/messages/batches", auth(anthropic{}, func(w http.ResponseWriter, r *http.Request) { s.listBatches(w, r, APIAnthropic) }))
	mux.HandleFunc("GET /v1/messages/batches/{id}", auth(anthropic{}, func(w http.ResponseWriter, r *http.Request) { s.getBatch(w, r, APIAnthropic, false) }))
	mux.HandleFunc("POST /v1/messages/batches/{id}/cancel", auth(anthropic{}, func(w http.ResponseWriter, r *http.Request) { s.getBatch(w, r, APIAnthropic, true) }))
	mux.HandleFunc("GET /v1/messages/batches/{id}/results", auth(anthropic{}, s.anthropicResults))
}

func (s *Server) uploadFile(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, openAIBatchMaxBytes+1<<20)
	if err := r.ParseMultipartForm(32 << 20); err != nil {
		openAI{}.writeError(w, apiError{status: http.StatusBadRequest, message: "reading the upload: " + err.Error()})
		return
	}
	if p := r.FormValue("purpose"); p != "batch" {
		openAI{}.writeError(w, apiError{status: http.StatusBadRequest, message: fmt.Sprintf("purpose: %q is not supported here; use batch", p)})
		return
	}
	f, hdr, err := r.FormFile("file")
	if err != nil {
		openAI{}.writeError(w, apiError{status: http.StatusBadRequest, message: "file: " + err.Error()})
		return
	}
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil {
		openAI{}.writeError(w, apiError{status: http.StatusBadRequest, message: "file: " + err.Error()})
		return
	}
	b := s.batchState()
	b.mu.Lock()
	id := "file-" + strconv.FormatUint(s.ids.Add(1), 10)
	b.files[id] = data
	b.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "object": "file", "bytes": len(data), "created_at": time.Now().Unix(),
		"filename": hdr.Filename, "purpose": "batch"})
}

func (s *Server) fileContent(w http.ResponseWriter, r *http.Request) {
	b := s.batchState()
	b.mu.Lock()
	data, ok := b.files[r.PathValue("id")]
	b.mu.Unlock()
	if !ok {
		openAI{}.writeError(w, apiError{status: http.StatusNotFound, message: "No such File object: " + r.PathValue("id")})
		return
	}
	w.Header().Set("Content-Type", "application/jsonl")
	w.Write(data)
}

// submit records a new batch of requests and counts them.
func (s *Server) submit(bt *batch) {
	b := s.batchState()
	b.mu.Lock()
	defer b.mu.Unlock()
	bt.created = time.Now()
	bt.ready = bt.created.Add(s.cfg.BatchDelay)
	// How many were in progress (a cancellation not yet in effect included)
	// with it: a client that submits anew while its old batches still run
	// pays for both.
	inProgress := 1
	for _, x := range b.list {
		s.process(b, x, bt.created)
		if !x.ended {
			inProgress++
		}
	}
	b.maxInProgress = max(b.maxInProgress, int64(inProgress))
	b.list = append(b.list, bt)
	b.byID[bt.id] = bt
	b.created++
	b.requests += int64(len(bt.requests))
	for _, rq := range bt.requests {
		if st := b.customIDs[bt.api+"/"+rq.customID]; st == "pending" || st == "ok" {
			b.duplicates++
		}
		b.customIDs[bt.api+"/"+rq.customID] = "pending"
	}
}

func (s *Server) createOpenAIBatch(w http.ResponseWriter, r *http.Request) {
	var in struct {
		InputFileID      string            `json:"input_file_id"`
		Endpoint         string            `json:"endpoint"`
		CompletionWindow string            `json:"completion_window"`
		Metadata         map[string]string `json:"metadata"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&in); err != nil {
		openAI{}.writeError(w, apiError{status: http.StatusBadRequest, message: err.Error()})
		return
	}
	switch {
	case in.Endpoint != "/v1/chat/completions":
		openAI{}.writeError(w, apiError{status: http.StatusBadRequest, message: fmt.Sprintf("endpoint: %q is not supported by fakellm", in.Endpoint)})
		return
	case in.CompletionWindow != "24h":
		openAI{}.writeError(w, apiError{status: http.StatusBadRequest, message: "completion_window: only 24h is supported"})
		return
	case len(in.Metadata) > 16:
		openAI{}.writeError(w, apiError{status: http.StatusBadRequest, message: "metadata: at most 16 keys"})
		return
	}
	b := s.batchState()
	b.mu.Lock()
	data, ok := b.files[in.InputFileID]
	b.mu.Unlock()
	if !ok {
		openAI{}.writeError(w, apiError{status: http.StatusNotFound, message: "No such File object: " + in.InputFileID})
		return
	}
	bt := &batch{id: "batch_" + strconv.FormatUint(s.ids.Add(1), 10), api: APIOpenAI, metadata: in.Metadata, inputID: in.InputFileID, window: in.CompletionWindow}
	bt.requests, bt.failure = parseOpenAIBatchFile(data)
	s.submit(bt)
	writeJSON(w, http.StatusOK, s.openAIBatchObject(bt))
}

// parseOpenAIBatchFile reads a batch input file; a bad file fails the batch
// at validation, as OpenAI's does.
func parseOpenAIBatchFile(data []byte) ([]batchRequest, *apiError) {
	if len(data) > openAIBatchMaxBytes {
		return nil, &apiError{status: http.StatusBadRequest, message: "the input file is larger than 200 MB"}
	}
	var out []batchRequest
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, maxBody)
	for line := 1; sc.Scan(); line++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var rq struct {
			CustomID string          `json:"custom_id"`
			Method   string          `json:"method"`
			URL      string          `json:"url"`
			Body     json.RawMessage `json:"body"`
		}
		switch err := json.Unmarshal(sc.Bytes(), &rq); {
		case err != nil:
			return nil, &apiError{status: http.StatusBadRequest, message: fmt.Sprintf("line %d: invalid JSON: %v", line, err)}
		case rq.CustomID == "":
			return nil, &apiError{status: http.StatusBadRequest, message: fmt.Sprintf("line %d: custom_id is required", line)}
		case seen[rq.CustomID]:
			return nil, &apiError{status: http.StatusBadRequest, message: fmt.Sprintf("line %d: the custom_id %s is not unique in the file", line, rq.CustomID)}
		case rq.Method != "POST" || rq.URL != "/v1/chat/completions":
			return nil, &apiError{status: http.StatusBadRequest, message: fmt.Sprintf("line %d: method and url must be POST /v1/chat/completions", line)}
		}
		seen[rq.CustomID] = true
		out = append(out, batchRequest{customID: rq.CustomID, body: rq.Body})
	}
	if len(out) == 0 {
		return nil, &apiError{status: http.StatusBadRequest, message: "the input file has no requests"}
	}
	if len(out) > openAIBatchMaxRequests {
		return nil, &apiError{status: http.StatusBadRequest, message: fmt.Sprintf("the input file has %d requests, more than %d", len(out), openAIBatchMaxRequests)}
	}
	return out, nil
}

func (s *Server) createAnthropicBatch(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, anthropicBatchMaxBytes)
	var in struct {
		Requests []struct {
			CustomID string          `json:"custom_id"`
			Params   json.RawMessage `json:"params"`
		} `json:"requests"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		anthropic{}.writeError(w, apiError{status: http.StatusBadRequest, message: err.Error()})
		return
	}
	if len(in.Requests) == 0 || len(in.Requests) > anthropicBatchMaxRequests {
		anthropic{}.writeError(w, apiError{status: http.StatusBadRequest, message: fmt.Sprintf("requests: between 1 and %d are allowed", anthropicBatchMaxRequests)})
		return
	}
	bt := &batch{id: "msgbatch_" + strconv.FormatUint(s.ids.Add(1), 10), api: APIAnthropic}
	seen := map[string]bool{}
	for i, rq := range in.Requests {
		switch {
		case !anthropicCustomID.MatchString(rq.CustomID):
			anthropic{}.writeError(w, apiError{status: http.StatusBadRequest, message: fmt.Sprintf("requests.%d.custom_id: must be 1 to 64 letters, digits, _ or -", i)})
			return
		case seen[rq.CustomID]:
			anthropic{}.writeError(w, apiError{status: http.StatusBadRequest, message: fmt.Sprintf("requests.%d.custom_id: %s is not unique in the batch", i, rq.CustomID)})
			return
		}
		seen[rq.CustomID] = true
		bt.requests = append(bt.requests, batchRequest{customID: rq.CustomID, body: rq.Params})
	}
	s.submit(bt)
	writeJSON(w, http.StatusOK, s.anthropicBatchObject(bt))
}

// process ends a batch once it is due: each request answered, failed or
// expired. b.mu is held.
func (s *Server) process(b *batches, bt *batch, now time.Time) {
	if bt.ended {
		return
	}
	if bt.cancelling && !now.Before(bt.cancelAsked.Add(s.cancelDelay())) && now.Before(bt.ready) {
		s.cancelNow(b, bt, now)
		return
	}
	if now.Before(bt.ready) {
		return
	}
	// Processed before a cancellation asked for took effect: answered (and
	// billed), and shown cancelled.
	bt.cancelled = bt.cancelling
	bt.ended, bt.endedAt = true, now
	var d dialect = openAI{}
	if bt.api == APIAnthropic {
		d = anthropic{}
	}
	for _, rq := range bt.requests {
		res := batchResult{customID: rq.customID}
		seq := s.ids.Add(1)
		switch {
		case bt.failure != nil:
			continue
		case s.chance(seq, drawBatchExpire, s.cfg.BatchExpireRate):
			res.expired = true
		case s.chance(seq, drawBatchFail, s.cfg.BatchFailureRate):
			res.status, res.errType, res.message = http.StatusInternalServerError, "api_error", "injected failure: the request failed in the batch"
		default:
			res = s.answer(b, d, rq)
		}
		if res.status == http.StatusOK {
			b.customIDs[bt.api+"/"+rq.customID] = "ok"
		} else {
			b.customIDs[bt.api+"/"+rq.customID] = "failed"
		}
		bt.results = append(bt.results, res)
	}
	// Not in submission order: results come as the provider finishes them.
	rng := rand.New(rand.NewPCG(uint64(s.cfg.Seed), seqOf(bt.id)))
	rng.Shuffle(len(bt.results), func(i, j int) { bt.results[i], bt.results[j] = bt.results[j], bt.results[i] })
	if bt.api == APIOpenAI && bt.failure == nil {
		var out, errs bytes.Buffer
		for _, res := range bt.results {
			line := map[string]any{"id": "batch_req_" + strconv.FormatUint(s.ids.Add(1), 10), "custom_id": res.customID}
			switch {
			case res.status == http.StatusOK:
				line["response"] = map[string]any{"status_code": 200, "request_id": "req_" + res.customID, "body": res.body}
				line["error"] = nil
			case res.expired:
				line["response"], line["error"] = nil, map[string]any{"code": "batch_expired", "message": "This request could not be executed before the completion window expired."}
			case res.canceled:
				line["response"], line["error"] = nil, map[string]any{"code": "batch_cancelled", "message": "This request was not executed because the batch was cancelled."}
			default:
				line["response"] = map[string]any{"status_code": res.status, "request_id": "req_" + res.customID,
					"body": map[string]any{"error": map[string]any{"message": res.message, "type": res.errType}}}
				line["error"] = nil
			}
			enc, _ := json.Marshal(line)
			if res.status == http.StatusOK {
				out.Write(append(enc, '\n'))
			} else {
				errs.Write(append(enc, '\n'))
			}
		}
		if out.Len() > 0 {
			bt.outputFile = "file-" + strconv.FormatUint(s.ids.Add(1), 10)
			b.files[bt.outputFile] = out.Bytes()
		}
		if errs.Len() > 0 {
			bt.errorFile = "file-" + strconv.FormatUint(s.ids.Add(1), 10)
			b.files[bt.errorFile] = errs.Bytes()
		}
	}
}

// seqOf is a batch id's number.
func seqOf(id string) uint64 {
	n, _ := strconv.ParseUint(id[strings.LastIndexByte(id, '_')+1:], 10, 64)
	return n
}

// answer answers one request of a batch as the synchronous API would.
func (s *Server) answer(b *batches, d dialect, rq batchRequest) batchResult {
	res := batchResult{customID: rq.customID}
	req, err := d.parse(rq.body)
	if err != nil {
		res.status, res.errType, res.message = http.StatusBadRequest, "invalid_request_error", err.Error()
		return res
	}
	req.wrongRate = s.cfg.WrongRate // answered as the synchronous API would
	var reply Reply
	if s.cfg.Responder != nil {
		reply = s.cfg.Responder(req)
	} else {
		reply = DefaultReply(req)
	}
	if reply.Status != 0 && reply.Status != http.StatusOK {
		res.status, res.errType, res.message = reply.Status, "api_error", statusText(reply.Status)
		return res
	}
	calls, err := s.toolCalls(reply.ToolCalls, d.toolIDPrefix())
	if err != nil {
		res.status, res.errType, res.message = http.StatusInternalServerError, "api_error", err.Error()
		return res
	}
	in := CountInputTokens(req)
	text, calls, out, cut := limitOutput(req.MaxTokens, reply.Reasoning, reply.Text, calls)
	b.inputTokens += in
	b.outputTokens += out
	rec := httptest.NewRecorder()
	d.writeCompletion(rec, &completion{id: strconv.FormatUint(s.ids.Add(1), 10), model: req.Model, text: text, toolCalls: calls, in: in, out: out, cut: cut})
	res.status, res.body = http.StatusOK, rec.Body.Bytes()
	return res
}

// cancelDelay is how long a cancellation takes: Config.BatchCancelDelay,
// default a second.
func (s *Server) cancelDelay() time.Duration {
	if s.cfg.BatchCancelDelay > 0 {
		return s.cfg.BatchCancelDelay
	}
	return time.Second
}

// cancelNow ends a batch whose cancellation took effect before it was
// processed: every request canceled; b.mu is held.
func (s *Server) cancelNow(b *batches, bt *batch, now time.Time) {
	bt.cancelled, bt.ended, bt.endedAt = true, true, now
	for _, rq := range bt.requests {
		bt.results = append(bt.results, batchResult{customID: rq.customID, canceled: true})
		b.customIDs[bt.api+"/"+rq.customID] = "failed"
	}
	if bt.api == APIOpenAI {
		var errs bytes.Buffer
		for _, res := range bt.results {
			enc, _ := json.Marshal(map[string]any{"id": "batch_req_" + strconv.FormatUint(s.ids.Add(1), 10), "custom_id": res.customID, "response": nil,
				"error": map[string]any{"code": "batch_cancelled", "message": "This request was not executed because the batch was cancelled."}})
			errs.Write(append(enc, '\n'))
		}
		bt.errorFile = "file-" + strconv.FormatUint(s.ids.Add(1), 10)
		b.files[bt.errorFile] = errs.Bytes()
	}
}

// shown is a time as the server reports it, on its own clock.
func (s *Server) shown(t time.Time) time.Time { return t.Add(s.cfg.ClockOffset) }

// getBatch shows (or, with cancel, cancels) a batch.
func (s *Server) getBatch(w http.ResponseWriter, r *http.Request, api string, cancel bool) {
	b := s.batchState()
	b.mu.Lock()
	bt, ok := b.byID[r.PathValue("id")]
	if !ok || bt.api != api {
		b.mu.Unlock()
		d := dialect(openAI{})
		if api == APIAnthropic {
			d = anthropic{}
		}
		d.writeError(w, apiError{status: http.StatusNotFound, message: "no such batch: " + r.PathValue("id")})
		return
	}
	now := time.Now()
	if cancel {
		b.cancelRequests++
	}
	if cancel && !bt.ended && !bt.cancelling {
		b.cancelled++
		bt.cancelling, bt.cancelAsked = true, now
	}
	s.process(b, bt, now)
	var obj any
	if api == APIOpenAI {
		obj = s.openAIBatchObject(bt)
	} else {
		obj = s.anthropicBatchObject(bt)
	}
	b.mu.Unlock()
	writeJSON(w, http.StatusOK, obj)
}

// listBatches lists an API's batches, newest first, limit at a time after
// an id (OpenAI's after, Anthropic's after_id).
func (s *Server) listBatches(w http.ResponseWriter, r *http.Request, api string) {
	limit := 20
	if v, err := strconv.Atoi(r.URL.Query().Get("limit")); err == nil && v >= 1 && v <= 100 {
		limit = v
	}
	after := r.URL.Query().Get("after")
	if api == APIAnthropic {
		after = r.URL.Query().Get("after_id")
	}
	b := s.batchState()
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	var page []any
	var ids []string
	started := after == ""
	hasMore := false
	for _, bt := range slices.Backward(b.list) {
		if bt.api != api {
			continue
		}
		if !started {
			started = bt.id == after
			continue
		}
		if len(page) == limit {
			hasMore = true
			break
		}
		s.process(b, bt, now)
		ids = append(ids, bt.id)
		if api == APIOpenAI {
			page = append(page, s.openAIBatchObject(bt))
		} else {
			page = append(page, s.anthropicBatchObject(bt))
		}
	}
	out := map[string]any{"data": page, "has_more": hasMore, "first_id": nil, "last_id": nil}
	if page == nil {
		out["data"] = []any{}
	}
	if len(ids) > 0 {
		out["first_id"], out["last_id"] = ids[0], ids[len(ids)-1]
	}
	if api == APIOpenAI {
		out["object"] = "list"
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) anthropicResults(w http.ResponseWriter, r *http.Request) {
	b := s.batchState()
	b.mu.Lock()
	bt, ok := b.byID[r.PathValue("id")]
	if ok {
		s.process(b, bt, time.Now())
	}
	if !ok || bt.api != APIAnthropic || !bt.ended {
		b.mu.Unlock()
		anthropic{}.writeError(w, apiError{status: http.StatusNotFound, message: "the batch's results are not available: it has not ended"})
		return
	}
	var out bytes.Buffer
	for _, res := range bt.results {
		var result any
		switch {
		case res.status == http.StatusOK:
			result = map[string]any{"type": "succeeded", "message": res.body}
		case res.expired:
			result = map[string]any{"type": "expired"}
		case res.canceled:
			result = map[string]any{"type": "canceled"}
		default:
			result = map[string]any{"type": "errored", "error": map[string]any{"type": "error", "error": map[string]any{"type": res.errType, "message": res.message}}}
		}
		enc, _ := json.Marshal(map[string]any{"custom_id": res.customID, "result": result})
		out.Write(append(enc, '\n'))
	}
	b.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-jsonl")
	w.Write(out.Bytes())
}

// openAIBatchObject is a batch as OpenAI shows it; b.mu is held.
func (s *Server) openAIBatchObject(bt *batch) map[string]any {
	counts := map[string]int{"total": len(bt.requests), "completed": 0, "failed": 0}
	status := "in_progress"
	o := map[string]any{
		"id": bt.id, "object": "batch", "endpoint": "/v1/chat/completions", "errors": nil, "input_file_id": bt.inputID,
		"completion_window": bt.window, "created_at": s.shown(bt.created).Unix(), "in_progress_at": s.shown(bt.created).Unix(),
		"expires_at": s.shown(bt.created).Add(24 * time.Hour).Unix(), "output_file_id": nil, "error_file_id": nil, "metadata": bt.metadata,
	}
	if bt.cancelling && !bt.ended {
		status = "cancelling"
		o["cancelling_at"] = s.shown(bt.cancelAsked).Unix()
	}
	switch {
	case bt.failure != nil:
		status, counts["total"] = "failed", 0
		o["errors"] = map[string]any{"object": "list", "data": []any{map[string]any{"code": "invalid_request", "message": bt.failure.message}}}
		o["failed_at"] = s.shown(bt.created).Unix()
	case bt.ended:
		expired := false
		for _, res := range bt.results {
			if res.status == http.StatusOK {
				counts["completed"]++
			} else {
				counts["failed"]++
			}
			expired = expired || res.expired
		}
		switch {
		case bt.cancelled:
			status = "cancelled"
			o["cancelled_at"] = s.shown(bt.endedAt).Unix()
		case expired:
			status = "expired"
			o["expired_at"] = s.shown(bt.endedAt).Unix()
		default:
			status = "completed"
			o["completed_at"] = s.shown(bt.endedAt).Unix()
		}
		if bt.outputFile != "" {
			o["output_file_id"] = bt.outputFile
		}
		if bt.errorFile != "" {
			o["error_file_id"] = bt.errorFile
		}
	}
	o["status"], o["request_counts"] = status, counts
	return o
}

// anthropicBatchObject is a batch as Anthropic shows it; b.mu is held.
func (s *Server) anthropicBatchObject(bt *batch) map[string]any {
	counts := map[string]int{"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
	o := map[string]any{
		"id": bt.id, "type": "message_batch", "created_at": s.shown(bt.created).UTC().Format(time.RFC3339Nano),
		"expires_at": s.shown(bt.created).Add(24 * time.Hour).UTC().Format(time.RFC3339Nano), "ended_at": nil, "cancel_initiated_at": nil,
		"archived_at": nil, "results_url": nil, "processing_status": "in_progress",
	}
	if bt.cancelling {
		o["cancel_initiated_at"] = s.shown(bt.cancelAsked).UTC().Format(time.RFC3339Nano)
	}
	if !bt.ended {
		counts["processing"] = len(bt.requests)
		if bt.cancelling {
			o["processing_status"] = "canceling"
		}
	} else {
		for _, res := range bt.results {
			switch {
			case res.status == http.StatusOK:
				counts["succeeded"]++
			case res.expired:
				counts["expired"]++
			case res.canceled:
				counts["canceled"]++
			default:
				counts["errored"]++
			}
		}
		o["processing_status"], o["ended_at"] = "ended", s.shown(bt.endedAt).UTC().Format(time.RFC3339Nano)
		o["results_url"] = "/v1/messages/batches/" + bt.id + "/results"
	}
	o["request_counts"] = counts
	return o
}
