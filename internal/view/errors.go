package view

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"unicode"

	"github.com/valyala/fastjson"

	"github.com/proctor-dev/proctor/runner/results"
)

// Errored samples are grouped by their error message, with what varies
// from one sample to the next masked: a word (letters, digits and _-.:)
// holding a digit (an id, a duration, a time, a line number) reads as #, except a three-digit number
// from 100 to 599, which is an HTTP status and tells errors apart. So a
// run's thousand "429 ... retry after 1234ms (request req_8f2a...)" make one
// group, apart from its "500 ..." ones.

// ErrorGroup is errored samples whose messages read alike.
type ErrorGroup struct {
	// Pattern is their message, masked: what a samples query's error
	// parameter names.
	Pattern string `json:"pattern"`
	Kind    string `json:"kind"`
	// Message is the first one's message, whole (to MaxGroupMessage).
	Message string `json:"message"`
	Count   int    `json:"count"`
	// Example is the first one.
	Example SampleRef `json:"example"`
}

// SampleRef names a sample of a run.
type SampleRef struct {
	Model   string `json:"model"`
	Dataset string `json:"dataset"`
	ID      string `json:"id"`
}

// MaxGroupMessage bounds an ErrorGroup's Message.
const MaxGroupMessage = 1000

// errorIndex is each errored row's group, read from the records once.
type errorIndex struct {
	once     sync.Once
	err      error
	patterns []string
	messages []string
	of       []int32 // a row's group; -1 for a row without an error
}

// errorGroups reads the errored rows' messages once, and says each one's
// group.
func (r *Run) errorGroups() (*errorIndex, error) {
	x := &r.errIndex
	x.once.Do(func() {
		x.of = make([]int32, len(r.rows))
		byPattern := map[string]int32{}
		var p fastjson.Parser
		win := &window{lf: r.lines}
		for i := range r.rows {
			x.of[i] = -1
			if r.rows[i].kind == 0 {
				continue
			}
			b, err := win.line(r.rows[i].off, r.rows[i].n)
			if err == nil {
				b, err = r.checked(i, b)
			}
			if err != nil {
				x.err = err
				return
			}
			v, err := p.ParseBytes(b)
			if err != nil {
				x.err = fmt.Errorf("sample %s: %w", r.id(i), err)
				return
			}
			msg := string(v.GetStringBytes("error"))
			pattern := r.kinds[r.rows[i].kind] + "\x00" + maskMessage(msg)
			g, ok := byPattern[pattern]
			if !ok {
				g = int32(len(x.patterns))
				byPattern[pattern] = g
				x.patterns = append(x.patterns, maskMessage(msg))
				x.messages = append(x.messages, results.CutUTF8(msg, MaxGroupMessage))
			}
			x.of[i] = g
		}
	})
	return x, x.err
}

// maskMessage is an error message with what varies masked: each word that
// holds a digit, unless it is an HTTP status.
func maskMessage(msg string) string {
	var b strings.Builder
	start := -1
	word := func(end int) {
		// A word's punctuation at its end ("8080:", "3.") is not its.
		w := strings.TrimRight(msg[start:end], ".:-")
		if strings.IndexFunc(w, unicode.IsDigit) >= 0 && !httpStatus(w) {
			b.WriteByte('#')
		} else {
			b.WriteString(w)
		}
		b.WriteString(msg[start+len(w) : end])
		start = -1
	}
	for i, r := range msg {
		if unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' || r == '-' || r == '.' || r == ':' {
			if start < 0 {
				start = i
			}
			continue
		}
		if start >= 0 {
			word(i)
		}
		b.WriteRune(r)
	}
	if start >= 0 {
		word(len(msg))
	}
	return b.String()
}

// httpStatus says whether w is a number from 100 to 599.
func httpStatus(w string) bool {
	return len(w) == 3 && w[0] >= '1' && w[0] <= '5' && w[1] >= '0' && w[1] <= '9' && w[2] >= '0' && w[2] <= '9'
}

// groups counts the errored rows among rows by group, the largest first.
func (r *Run) groups(rows []int32) ([]ErrorGroup, error) {
	x, err := r.errorGroups()
	if err != nil {
		return nil, err
	}
	at := map[int32]int{}
	var out []ErrorGroup
	for _, i := range rows {
		g := x.of[i]
		if g < 0 {
			continue
		}
		k, ok := at[g]
		if !ok {
			k = len(out)
			at[g] = k
			w := &r.rows[i]
			out = append(out, ErrorGroup{Pattern: x.patterns[g], Kind: r.kinds[w.kind], Message: x.messages[g],
				Example: SampleRef{Model: r.Models[w.model], Dataset: r.Datasets[w.dataset], ID: string(r.id(int(i)))}})
		}
		out[k].Count++
	}
	slices.SortStableFunc(out, func(a, b ErrorGroup) int { return cmp.Compare(b.Count, a.Count) })
	return out, nil
}

// inGroup says whether row i's error reads like pattern.
func (x *errorIndex) inGroup(i int, pattern string) bool {
	return x.of[i] >= 0 && x.patterns[x.of[i]] == pattern
}

// errorsOf serves the groups of the errored samples a samples view selects.
func (s *Server) errorsOf(w http.ResponseWriter, r *http.Request) {
	run, err := s.run(r, "run")
	if err != nil {
		s.fail(w, err)
		return
	}
	rows, err := selected(run, r.URL.Query())
	if err != nil {
		s.fail(w, err)
		return
	}
	groups, err := run.groups(rows)
	if err != nil {
		s.fail(w, err)
		return
	}
	total := 0
	for _, g := range groups {
		total += g.Count
	}
	writeJSON(w, http.StatusOK, struct {
		Errored int          `json:"errored"`
		Groups  []ErrorGroup `json:"groups"`
	}{total, append([]ErrorGroup{}, groups...)})
}
