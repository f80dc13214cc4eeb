package fakellm

import "unicode/utf8"

// tokenPattern is the token definition, documented here and checked against
// CountTokens by the tests. It is deliberately not "characters/4", so a client
// cannot predict the server's count exactly and must cope with estimates.
const tokenPattern = `[A-Za-z0-9]+|[^A-Za-z0-9\s]`

// perMessageTokens is the overhead every message adds to the input count.
const perMessageTokens = 3

// CountTokens returns the number of matches of `[A-Za-z0-9]+|[^A-Za-z0-9\s]` in s:
// each run of ASCII letters and digits is one token, and so is every other rune
// except the ASCII spaces of RE2's \s (tab, newline, form feed, carriage return,
// space). It is a hand-written scanner because regexp is far too slow for the
// request path; an invalid UTF-8 byte counts as one token, as it does for regexp.
func CountTokens(s string) int {
	n := 0
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case isAlnum(c):
			i++
			for i < len(s) && isAlnum(s[i]) {
				i++
			}
			n++
		case c < utf8.RuneSelf:
			if !isSpace(c) {
				n++
			}
			i++
		default:
			_, size := utf8.DecodeRuneInString(s[i:])
			i += size
			n++
		}
	}
	return n
}

// CountInputTokens returns the input tokens the server charges for req: the tokens
// of the system prompt, of every message's text (and of the names and arguments of
// the tool calls an assistant message carries), of each tool's name, description
// and parameters JSON, plus 3 per message. Both APIs are counted on the same
// provider-neutral form, so one conversation costs the same on either endpoint.
func CountInputTokens(req Request) int64 {
	n := CountTokens(req.System)
	for _, m := range req.Messages {
		n += perMessageTokens + CountTokens(m.Content)
		for _, tc := range m.ToolCalls {
			n += CountTokens(tc.Name) + CountTokens(string(tc.Arguments))
		}
	}
	for _, t := range req.Tools {
		n += CountTokens(t.Name) + CountTokens(t.Description) + CountTokens(string(t.Parameters))
	}
	return int64(n)
}

// countOutputTokens counts a reply the same way: its text plus its tool calls'
// names and arguments, at least 1 so that every answer costs something.
func countOutputTokens(text string, calls []ToolCall) int64 {
	n := CountTokens(text)
	for _, tc := range calls {
		n += CountTokens(tc.Name) + CountTokens(string(tc.Arguments))
	}
	return int64(max(n, 1))
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// isSpace is RE2's \s, which (unlike unicode.IsSpace) excludes \v and non-ASCII spaces.
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\f' || c == '\r'
}

// limitOutput applies a request's max_tokens (0: none) to an answer of text
// and calls after reasoning tokens of thought, as providers do: the answer
// stops where the tokens run out (a tool call cut short is no call), and a
// model that thought them all away answers nothing. It returns what is
// answered, the output tokens billed, and whether max_tokens stopped it.
func limitOutput(maxTokens, reasoning int, text string, calls []ToolCall) (string, []ToolCall, int64, bool) {
	out := int64(reasoning) + countOutputTokens(text, calls)
	if maxTokens <= 0 || out <= int64(maxTokens) {
		return text, calls, out, false
	}
	return firstTokens(text, maxTokens-reasoning), nil, int64(maxTokens), true
}

// firstTokens is the start of s holding its first n tokens (CountTokens's).
func firstTokens(s string, n int) string {
	if n <= 0 {
		return ""
	}
	seen := 0
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case isAlnum(c):
			for i < len(s) && isAlnum(s[i]) {
				i++
			}
		case c < utf8.RuneSelf:
			i++
			if isSpace(c) {
				continue
			}
		default:
			_, size := utf8.DecodeRuneInString(s[i:])
			i += size
		}
		if seen++; seen == n {
			return s[:i]
		}
	}
	return s
}
