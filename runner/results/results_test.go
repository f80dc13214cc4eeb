package results

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestSetReasonKeepsTheVerdict: a judge's long reply is cut from its
// start, so that the verdict line, last, stays.
func TestSetReasonKeepsTheVerdict(t *testing.T) {
	var r Record
	r.SetReason("short", "Fine.\nVERDICT: CORRECT")
	long := strings.Repeat("é", MaxReasonBytes) + "\nVERDICT: INCORRECT"
	r.SetReason("long", long)
	if r.Reasons["short"] != "Fine.\nVERDICT: CORRECT" {
		t.Errorf("short reason %q", r.Reasons["short"])
	}
	got := r.Reasons["long"]
	if len(got) > MaxReasonBytes || !strings.HasPrefix(got, "…é") || !strings.HasSuffix(got, "\nVERDICT: INCORRECT") || !utf8.ValidString(got) {
		t.Errorf("long reason: %d bytes, starts %q, ends %q", len(got), got[:8], got[len(got)-20:])
	}
}
