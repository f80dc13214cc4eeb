package fakellm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// dialect is one API's wire format: how to read a request and write answers.
type dialect interface {
	// parse decodes and validates a request body; an error is answered 400.
	parse(body []byte) (Request, error)
	toolIDPrefix() string
	writeCompletion(w http.ResponseWriter, c *completion)
	writeError(w http.ResponseWriter, e apiError)
	// failureStatuses are the statuses an injected failure picks from.
	failureStatuses() []int
	// rateLimitHeaders writes the rate limits' state, as the provider's
	// headers report it, at now on the server's clock.
	rateLimitHeaders(h http.Header, st limitState, now time.Time)
}

// completion is a successful answer, ready to be written.
type completion struct {
	id        string
	model     string
	text      string
	toolCalls []ToolCall // ids assigned, arguments compacted
	in, out   int64
	// cut says max_tokens stopped the answer.
	cut bool
}

// apiError is an error answer.
type apiError struct {
	status  int
	message string
	limit   string // for 429s: limitRequests or limitTokens
}

// textContent decodes a text-only content field that may be a string, null, or an
// array of parts/blocks; the text of the "text" parts is joined by newlines and
// the other parts (images, documents) are ignored.
type textContent string

func (c *textContent) UnmarshalJSON(b []byte) error {
	switch b[0] {
	case 'n':
		*c = ""
		return nil
	case '"':
		return json.Unmarshal(b, (*string)(c))
	case '[':
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(b, &parts); err != nil {
			return err
		}
		var texts []string
		for _, p := range parts {
			if p.Type == "text" {
				texts = append(texts, p.Text)
			}
		}
		*c = textContent(strings.Join(texts, "\n"))
		return nil
	}
	return errors.New("content must be a string, null or an array of content parts")
}

// decode unmarshals a request body, wording errors for the client.
func decode(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return errors.New("the request body is empty; it must be a JSON object")
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("invalid JSON body: %w", err)
	}
	return nil
}

// checkRange validates an optional sampling parameter.
func checkRange(name string, v *float64, lo, hi float64) error {
	if v != nil && !(*v >= lo && *v <= hi) {
		return fmt.Errorf("%s: %v is not in [%v, %v]", name, *v, lo, hi)
	}
	return nil
}

func ptr[T any](v T) *T { return &v }

// rateLimitHeaders writes what OpenAI documents in its rate-limit headers:
// x-ratelimit-{limit,remaining,reset}-{requests,tokens}, the reset as a
// duration ("1s", "6m0s"). Its tokens limit is the input tokens' here.
func (openAI) rateLimitHeaders(h http.Header, st limitState, _ time.Time) {
	for d, name := range map[int]string{0: "requests", 1: "tokens"} {
		ds := st.dims[d]
		if ds.limit == 0 {
			continue
		}
		h.Set("X-Ratelimit-Limit-"+name, strconv.FormatInt(ds.limit, 10))
		h.Set("X-Ratelimit-Remaining-"+name, strconv.FormatInt(ds.remaining, 10))
		h.Set("X-Ratelimit-Reset-"+name, time.Duration(ds.reset).Round(time.Millisecond).String())
	}
}

// rateLimitHeaders writes what Anthropic documents:
// anthropic-ratelimit-{requests,input-tokens,output-tokens}-{limit,remaining,reset},
// the reset as an RFC 3339 time on the server's clock, and
// anthropic-ratelimit-tokens-* for the most restrictive token limit.
func (anthropic) rateLimitHeaders(h http.Header, st limitState, now time.Time) {
	set := func(name string, ds dimState) {
		h.Set("Anthropic-Ratelimit-"+name+"-Limit", strconv.FormatInt(ds.limit, 10))
		h.Set("Anthropic-Ratelimit-"+name+"-Remaining", strconv.FormatInt(ds.remaining, 10))
		h.Set("Anthropic-Ratelimit-"+name+"-Reset", now.Add(time.Duration(ds.reset)).UTC().Format(time.RFC3339))
	}
	var tightest *dimState
	for d, name := range []string{"Requests", "Input-Tokens", "Output-Tokens"} {
		ds := st.dims[d]
		if ds.limit == 0 {
			continue
		}
		set(name, ds)
		if d > 0 && (tightest == nil || ds.remaining*tightest.limit < tightest.remaining*ds.limit) {
			tightest = &st.dims[d]
		}
	}
	if tightest != nil {
		set("Tokens", *tightest)
	}
}
