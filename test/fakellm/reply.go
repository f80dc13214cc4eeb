package fakellm

import (
	"encoding/json"
	"hash/fnv"
	"math/big"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// Request is a model request as a Responder sees it, the same for both APIs.
type Request struct {
	API    string // APIOpenAI or APIAnthropic
	Model  string
	System string // OpenAI system and developer messages, joined by newlines
	// Messages are the turns in order. Roles are "user", "assistant" and "tool";
	// an Anthropic user turn's tool_result blocks become "tool" messages, followed
	// by a "user" message with its text, if any.
	Messages    []Message
	Tools       []Tool
	MaxTokens   int // 0 when the client did not say
	Temperature *float64
	Header      http.Header

	// wrongRate is the server's Config.WrongRate, carried here so that a custom
	// Responder that falls back to DefaultReply still gets the server's behaviour.
	wrongRate float64
}

// Message is one turn. Content is its text: content-part arrays and text blocks
// are joined by newlines.
type Message struct {
	Role       string
	Content    string
	ToolCallID string     // on "tool" messages: the call this answers
	ToolCalls  []ToolCall // on "assistant" messages
}

// Tool is a function the client declared.
type Tool struct {
	Name        string
	Description string
	Parameters  json.RawMessage // the JSON Schema as the client sent it
}

// ToolCall is a call of a tool by the model.
type ToolCall struct {
	ID        string // in a Reply, empty means "generate one" (call_<n> or toolu_<n>)
	Name      string
	Arguments json.RawMessage // a JSON object; empty means {}
}

// Reply is a Responder's answer.
type Reply struct {
	Text string
	// ToolCalls, when non-empty, make the answer a tool-use turn (OpenAI
	// finish_reason "tool_calls", Anthropic stop_reason "tool_use").
	ToolCalls []ToolCall
	// Delay is waited before answering, on top of Config.Latency and jitter.
	Delay time.Duration
	// Status, when neither 0 nor 200, makes the server answer with this error
	// status (in the API's error shape) instead of a completion.
	Status int
	// Reasoning is how many tokens the model spends thinking before it
	// answers: billed as output, and within the request's max_tokens, so that
	// a reasoning model given too few answers nothing (OpenAI: content null,
	// finish_reason "length"; Anthropic: stop_reason "max_tokens").
	Reasoning int
}

// The API names in Request.API.
const (
	APIOpenAI    = "openai"
	APIAnthropic = "anthropic"
)

// The markers DefaultReply looks for. Directive markers start a line of the last
// user message; the text after them is trimmed.
const (
	MarkerSleep  = "SLEEP:"  // SLEEP: <Go duration>  wait this long, then go on with the other rules
	MarkerStatus = "STATUS:" // STATUS: <code>        answer with this error status
	MarkerReply  = "REPLY:"  // REPLY: <text>         answer with this text
	MarkerTool   = "TOOL:"   // TOOL: <name> <json>   call this tool with these arguments
	MarkerThink  = "THINK:"  // THINK: <tokens>       think this many tokens first (Reply.Reasoning), and go on

	// A judge prompt has a line starting with each of these.
	MarkerExpected  = "[Expected answer]:"
	MarkerSubmitted = "[Submitted answer]:"

	// The two answers to a judge prompt.
	VerdictCorrect   = "VERDICT: CORRECT"
	VerdictIncorrect = "VERDICT: INCORRECT"
)

// arithRe finds the first binary arithmetic expression in a text.
var arithRe = regexp.MustCompile(`(-?\d+(?:\.\d+)?)\s*([-+*/×x])\s*(-?\d+(?:\.\d+)?)`)

// DefaultReply answers req by the default rules, applied to the text of the last
// user message:
//
//  1. a line "SLEEP: <duration>" sets Reply.Delay, and a line "THINK: <n>"
//     Reply.Reasoning, and the rules go on;
//  2. a line "STATUS: <code>" answers with that error status;
//  3. a line "REPLY: <text>" answers with the text;
//  4. a line "TOOL: <name> <json object>" calls that tool with those arguments;
//  5. a judge prompt (lines starting "[Expected answer]:" and "[Submitted answer]:")
//     answers "VERDICT: CORRECT" if the two agree after trimming, lowercasing and
//     dropping a trailing period, else "VERDICT: INCORRECT";
//  6. the first arithmetic expression "a op b" (op one of + - * / × x) is answered
//     with its exact value (a deterministic Config.WrongRate fraction of questions,
//     chosen by a hash of the text, are answered off by one);
//  7. if tools were declared, the tool whose name shares the most words with the
//     text is called with {} (ties go to the earlier tool);
//  8. otherwise the text is echoed.
//
// Once the last user message has been followed by tool results, the tool rules (4
// and 7) no longer apply, so an agent loop ends: a model that called a tool must
// eventually answer. In that state rule 8 answers with the tool results' text.
func DefaultReply(req Request) Reply {
	text, toolResults, toolsDone := lastUserTurn(req.Messages)
	var reply Reply
	var status, replyText, toolLine, expected, submitted string
	var haveReply, haveTool, haveExpected, haveSubmitted bool
	for line := range strings.SplitSeq(text, "\n") {
		line = strings.TrimSpace(line)
		if rest, ok := strings.CutPrefix(line, MarkerThink); ok && reply.Reasoning == 0 {
			if n, err := strconv.Atoi(strings.TrimSpace(rest)); err == nil && n > 0 {
				reply.Reasoning = n
			}
		} else if rest, ok := strings.CutPrefix(line, MarkerSleep); ok && reply.Delay == 0 {
			if d, err := time.ParseDuration(strings.TrimSpace(rest)); err == nil && d > 0 {
				reply.Delay = d
			}
		} else if rest, ok := strings.CutPrefix(line, MarkerStatus); ok && status == "" {
			status = strings.TrimSpace(rest)
		} else if rest, ok := strings.CutPrefix(line, MarkerReply); ok && !haveReply {
			replyText, haveReply = strings.TrimSpace(rest), true
		} else if rest, ok := strings.CutPrefix(line, MarkerTool); ok && !haveTool {
			toolLine, haveTool = strings.TrimSpace(rest), true
		} else if rest, ok := strings.CutPrefix(line, MarkerExpected); ok && !haveExpected {
			expected, haveExpected = rest, true
		} else if rest, ok := strings.CutPrefix(line, MarkerSubmitted); ok && !haveSubmitted {
			submitted, haveSubmitted = rest, true
		}
	}

	// Rule 2. STATUS: 200 (or nonsense) is not an error, so it is ignored.
	if code, err := strconv.Atoi(status); err == nil && code >= 100 && code <= 599 && code != http.StatusOK {
		reply.Status = code
		return reply
	}
	// Rule 3.
	if haveReply {
		reply.Text = replyText
		return reply
	}
	// Rule 4. A line whose arguments are not a JSON object is not a directive.
	if haveTool && !toolsDone {
		name, args, _ := strings.Cut(toolLine, " ")
		args = strings.TrimSpace(args)
		if args == "" {
			args = "{}"
		}
		if name != "" && strings.HasPrefix(args, "{") && json.Valid([]byte(args)) {
			reply.ToolCalls = []ToolCall{{Name: name, Arguments: json.RawMessage(args)}}
			return reply
		}
	}
	// Rule 5.
	if haveExpected && haveSubmitted {
		reply.Text = VerdictIncorrect
		if normalizeAnswer(expected) == normalizeAnswer(submitted) {
			reply.Text = VerdictCorrect
		}
		return reply
	}
	// Rule 6.
	if answer, ok := arithmetic(text, req.wrongRate); ok {
		reply.Text = answer
		return reply
	}
	// Rule 7.
	if len(req.Tools) > 0 && !toolsDone {
		reply.ToolCalls = []ToolCall{{Name: closestTool(text, req.Tools), Arguments: json.RawMessage("{}")}}
		return reply
	}
	// Rule 8.
	reply.Text = text
	if toolsDone {
		reply.Text = toolResults
	}
	return reply
}

// lastUserTurn returns the text of the last user message, the text of the tool
// results that follow it (joined by newlines), and whether there were any.
func lastUserTurn(msgs []Message) (text, toolResults string, toolsDone bool) {
	last := -1
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == "user" {
			last = i
			break
		}
	}
	if last >= 0 {
		text = msgs[last].Content
	}
	var results []string
	for _, m := range msgs[last+1:] {
		if m.Role == "tool" {
			results = append(results, m.Content)
		}
	}
	return text, strings.Join(results, "\n"), len(results) > 0
}

func normalizeAnswer(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	return strings.TrimSpace(strings.TrimSuffix(s, "."))
}

// arithmetic evaluates the first expression in text exactly (with rationals, so
// that 0.1+0.2 is 0.3) and formats integers as integers.
func arithmetic(text string, wrongRate float64) (string, bool) {
	if !strings.ContainsAny(text, "0123456789") { // skip the regexp on most prose
		return "", false
	}
	m := arithRe.FindStringSubmatch(text)
	if m == nil {
		return "", false
	}
	a, okA := new(big.Rat).SetString(m[1])
	b, okB := new(big.Rat).SetString(m[3])
	if !okA || !okB {
		return "", false
	}
	r := new(big.Rat)
	switch m[2] {
	case "+":
		r.Add(a, b)
	case "-":
		r.Sub(a, b)
	case "*", "×", "x":
		r.Mul(a, b)
	case "/":
		if b.Sign() == 0 {
			return "undefined", true
		}
		r.Quo(a, b)
	}
	if wrongRate > 0 && unitHash(text) < wrongRate {
		r.Add(r, big.NewRat(1, 1))
	}
	if r.IsInt() {
		return r.Num().String(), true
	}
	f, _ := r.Float64()
	return strconv.FormatFloat(f, 'g', -1, 64), true
}

// unitHash maps s to [0, 1), the same on every run, so that which questions are
// answered wrongly does not change between reruns.
func unitHash(s string) float64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return unitFloat(mix64(h.Sum64()))
}

// closestTool returns the name of the tool whose name shares the most distinct
// words with text; ties go to the earlier tool.
func closestTool(text string, tools []Tool) string {
	words := make(map[string]bool)
	for _, w := range splitWords(text) {
		words[w] = true
	}
	best, bestScore := tools[0].Name, -1
	for _, t := range tools {
		score := 0
		seen := make(map[string]bool)
		for _, w := range splitWords(t.Name) {
			if words[w] && !seen[w] {
				seen[w] = true
				score++
			}
		}
		if score > bestScore {
			best, bestScore = t.Name, score
		}
	}
	return best
}

// splitWords splits s on runs of characters other than letters and digits and
// lowercases the words.
func splitWords(s string) []string {
	return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
}

// mix64 is the SplitMix64 finaliser: a cheap, well-mixing 64-bit bijection.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// unitFloat maps 64 random bits to [0, 1).
func unitFloat(x uint64) float64 {
	return float64(x>>11) / (1 << 53)
}
