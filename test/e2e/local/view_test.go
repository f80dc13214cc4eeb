package local_test

import (
	"context"
	"encoding/csv"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/proctor-dev/proctor/test/fakellm"
)

// regressed is the sample the candidate run answers wrong, and only it.
const regressed = "q07"

// TestViewInABrowser drives proctor view's page in a real headless Chromium
// (Debian's): two runs of 20 arithmetic questions and 2 that the server
// refuses; the candidate answers one question wrong. It loads the runs,
// filters to the errored samples and opens one, compares the runs and
// finds the regression first, and exports the errored samples as CSV.
// Screenshots of each page are kept in ARTIFACTS (default
// _artifacts/view); UPDATE_SCREENSHOTS=1 also writes the README's.
func TestViewInABrowser(t *testing.T) {
	var samples strings.Builder
	for i := 1; i <= 20; i++ {
		fmt.Fprintf(&samples, "      - {id: q%02d, input: \"What is %d+%d?\", expected: \"%d\"}\n", i, i, 100, i+100)
	}
	samples.WriteString("      - {id: r01, input: \"STATUS: 400\", expected: \"0\"}\n      - {id: r02, input: \"STATUS: 400\", expected: \"0\"}\n")
	// The runs are written into the viewer's directory, so that it names
	// them as a user would: proctor view nightly candidate.
	vw := newWorkspace(t)
	runOf := func(name string, cfg fakellm.Config) string {
		t.Helper()
		srv := newFake(t, cfg)
		w := newWorkspace(t)
		w.out = filepath.Join(vw.dir, name)
		w.writeEval(name, fmt.Sprintf(`  datasets:
  - name: arithmetic
    source:
      inline:
%s  models:
  - name: small
    provider: openai
    model: fake-small
    baseURL: %s
  prompt: {system: "Answer with a number only."}
  retry: {maxAttempts: 1}
  scoring: [{type: exact_match, normalize: [trim]}]
`, samples.String(), srv.OpenAIURL()))
		res := w.run()
		// The refused samples make the run exit 1 only if every sample failed.
		if res.Code != 0 {
			t.Fatalf("proctor run: %v", res)
		}
		return name
	}
	base := runOf("nightly", fakellm.Config{})
	cand := runOf("candidate", fakellm.Config{Responder: func(r fakellm.Request) fakellm.Reply {
		if n := len(r.Messages); n > 0 && strings.Contains(r.Messages[n-1].Content, "What is 7+100?") {
			return fakellm.Reply{Text: "108"}
		}
		return fakellm.DefaultReply(r)
	}})

	b := browse(t, vw, base, cand)
	ctx, url, do, text, shot := b.ctx, b.url, b.do, b.text, b.shot

	// The runs: each model's score, with its interval, and the errors.
	do(chromedp.WaitVisible(chromedp.CSS("#run-2")))
	runsText := text("main")
	shot("runs")
	for _, want := range []string{"Run 1: " + base, "Run 2: " + cand, "0.9091 [0.7219, 0.9747]", "0.8636", "Errored (2)"} {
		if !strings.Contains(runsText, want) {
			t.Errorf("the runs page does not show %q:\n%s", want, runsText)
		}
	}
	if m := regexp.MustCompile(`\b(null|undefined|NaN)\b`).FindString(runsText); m != "" {
		t.Errorf("the runs page shows %q:\n%s", m, runsText)
	}

	// The trend across the two runs: a series with a marker per run, and
	// its values as a table.
	const trend = "section[aria-labelledby=trends] "
	do(chromedp.Click(chromedp.CSS(trend+"details summary")), chromedp.WaitVisible(chromedp.CSS(trend+"table")))
	markers, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("`+trend+`svg[role=img] path.marker").length`))
	if err != nil {
		t.Fatal(err)
	}
	if tbl := text(trend + "table"); markers != 2 || !strings.Contains(tbl, "small / arithmetic") ||
		!strings.Contains(tbl, "0.909 [0.722, 0.975]") || !strings.Contains(tbl, "0.864 [") {
		t.Errorf("the trend: %d markers, its table:\n%s", markers, tbl)
	}
	// Another measure, from its URL: the errored share (2 of 22 in each).
	do(chromedp.Navigate(url+"#/runs?trend=errored"), chromedp.WaitVisible(chromedp.CSS(trend+"svg")))
	do(chromedp.Click(chromedp.CSS(trend+"details summary")), chromedp.WaitVisible(chromedp.CSS(trend+"table")))
	if tbl := text(trend + "table"); strings.Count(tbl, "9.1%") != 2 {
		t.Errorf("the errored share's trend:\n%s", tbl)
	}

	// The errored samples of the candidate, and one opened with the keyboard
	// alone: focus the table, move to the first row, open it.
	do(chromedp.Navigate(url+"#/samples?run=2&status=errored"), chromedp.WaitVisible(chromedp.CSS(`.grid[aria-label="Samples"] .row`)))
	count := text("[role=status]")
	href, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS(`a[href*="format=csv"]`), "href"))
	if err != nil {
		t.Fatal(err)
	}
	do(chromedp.Focus(chromedp.CSS(".grid")), chromedp.KeyEvent(kb.ArrowDown), chromedp.KeyEvent(kb.Enter),
		chromedp.WaitVisible(chromedp.CSS(".detail h2")))
	detail := text(".detail")
	shot("samples")
	if count != "2 of 22 samples" {
		t.Errorf("errored samples: %q, want 2 of 22", count)
	}
	if !strings.Contains(detail, "small · arithmetic · r01") || !strings.Contains(detail, "⚠ call") || !strings.Contains(detail, "400") ||
		!strings.Contains(detail, "[system]\nAnswer with a number only.") || !strings.Contains(detail, "[user]\nSTATUS: 400") ||
		!strings.Contains(detail, "Expected") || regexp.MustCompile(`\b(null|undefined)\b|\[object `).MatchString(detail) {
		t.Errorf("the opened sample shows:\n%s", detail)
	}

	// Their errors, grouped by message: the refusals are one group; it
	// shows them.
	const groupsSel = "section[aria-labelledby=error-groups]"
	do(chromedp.WaitVisible(chromedp.CSS(groupsSel + " table")))
	if groups := text(groupsSel); !strings.Contains(groups, "by message (2)") || !regexp.MustCompile(`\b2\s+call\s+HTTP 400 `).MatchString(groups) {
		t.Errorf("the errors by message:\n%s", groups)
	}
	do(chromedp.Click(chromedp.CSS(groupsSel+" a")), chromedp.WaitVisible(chromedp.CSS("main p.toolbar code")))
	waitFor(t, 30*time.Second, "the group's samples", func() bool { return text("[role=status]") == "2 of 22 samples" })

	// The export the page links to has those rows.
	resp, err := http.Get(strings.TrimSuffix(url, "/") + href.Value)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(resp.Body).ReadAll()
	resp.Body.Close()
	if err != nil || len(rows) != 3 || rows[1][2] != "r01" || rows[2][2] != "r02" || rows[1][4] != "call" {
		t.Errorf("the CSV export of the errored samples (%s): %v %v", href.Value, rows, err)
	}

	// The comparison: the regression comes first, and opens side by side.
	pairs := `.grid[aria-label="Pairs, regressions first"] .row`
	do(chromedp.Navigate(url+"#/compare?base=1&cand=2"), chromedp.WaitVisible(chromedp.CSS(pairs)))
	first, status := text(pairs), text("main [role=status]")
	do(chromedp.Click(chromedp.CSS(pairs)), chromedp.WaitVisible(chromedp.CSS(".sides h2")))
	sides := text(".sides")
	shot("compare")
	if !strings.Contains(first, "▼ regressed") || !strings.Contains(first, regressed) {
		t.Errorf("the first pair is %q, want the regression %s", first, regressed)
	}
	if !strings.Contains(status, "▼ 1 regressed") || !strings.Contains(status, "▲ 0 improved") {
		t.Errorf("the comparison says %q", status)
	}
	if !strings.Contains(sides, "107") || !strings.Contains(sides, "108") {
		t.Errorf("the pair side by side shows:\n%s", sides)
	}
	// Its export, in the view's order: the regression first.
	href, err = chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS(`main a[href*="compare/export?format=csv"]`), "href"))
	if err != nil {
		t.Fatal(err)
	}
	if resp, err = http.Get(strings.TrimSuffix(url, "/") + href.Value); err != nil {
		t.Fatal(err)
	}
	rows, err = csv.NewReader(resp.Body).ReadAll()
	resp.Body.Close()
	if err != nil || len(rows) != 23 || rows[1][3] != regressed || rows[1][4] != "regressed" || rows[2][4] != "same" {
		t.Errorf("the comparison's CSV export (%s): %v %v", href.Value, rows, err)
	}
}

// browser is a headless Chromium on proctor view's page of the sources.
type browser struct {
	ctx  context.Context
	url  string
	do   func(steps ...chromedp.Action[chromedp.Void])
	text func(sel string) string
	// shot keeps a screenshot of the page as ARTIFACTS/name.png.
	shot func(name string)
}

// browse starts proctor view of sources in w's directory, and a browser on
// its page.
func browse(t *testing.T, w *workspace, sources ...string) *browser {
	t.Helper()
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("no chromium (make test-e2e-local installs it: hack/install-host-deps.sh images): %v", err)
	}
	view := w.start(append([]string{"view"}, append(sources, "--addr", "127.0.0.1:0")...)...)
	t.Cleanup(func() { view.signal(os.Interrupt); view.wait() })
	var url string
	waitFor(t, 30*time.Second, "proctor view to serve", func() bool {
		m := regexp.MustCompile(`at (http://127\.0\.0\.1:\d+/)`).FindStringSubmatch(view.stdout.String())
		if m != nil {
			url = m[1]
		}
		return m != nil || view.exited()
	})
	if url == "" {
		t.Fatalf("proctor view: %v", view.wait())
	}

	artifacts := os.Getenv("ARTIFACTS")
	if artifacts == "" {
		artifacts = filepath.Join("..", "..", "..", "_artifacts", "view")
	}
	if err := os.MkdirAll(artifacts, 0o755); err != nil {
		t.Fatal(err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox,
		chromedp.WindowSize(1400, 1000), chromedp.Flag("disable-gpu", true))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	bctx, cancel := chromedp.NewContext(actx, chromedp.WithErrorf(t.Logf))
	t.Cleanup(cancel)
	// The first call starts the browser, on a context without a deadline
	// (a deadline would stop the browser); the steps after it are bounded.
	if err := chromedp.Do(bctx, chromedp.Navigate(url)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bctx, 2*time.Minute)
	t.Cleanup(cancel)
	b := &browser{ctx: ctx, url: url}
	b.do = func(steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatal(err)
		}
	}
	b.text = func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("%s: %v", sel, err)
		}
		return s
	}
	b.shot = func(name string) {
		t.Helper()
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if os.Getenv("UPDATE_SCREENSHOTS") != "" && (name == "runs" || name == "compare") {
			if err := os.WriteFile(filepath.Join("..", "..", "..", "docs", "images", "view-"+name+".png"), png, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(artifacts, name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// TestViewShowsAnAgentsCalls: an agent's calls through its endpoint's
// proxy, listed one by one in its sample's detail, as a real run of the
// fake agent made them.
func TestViewShowsAnAgentsCalls(t *testing.T) {
	_, w, endpoint := teamKey(t, 2, 600)
	endpoint = strings.Replace(endpoint, "---\n", `  pricing:
  - {model: fake-agent, pricing: {inputPerMillion: 2, outputPerMillion: 8}}
---
`, 1)
	w.write("evaluation.yaml", endpoint+evaluation("agents", fmt.Sprintf(`  datasets:
  - name: qs
    source: {file: qs.jsonl}
  models:
  - name: bot
    provider: agent
    agent:
      command: [%q, -calls, "3", "{{ .Prompt }}"]
      endpoints:
      - {endpointRef: {name: team-key}, baseURLEnv: OPENAI_BASE_URL, apiKeyEnv: OPENAI_API_KEY}
  scoring:
  - type: exact_match
`, fakeAgentBin)))
	if res := w.run(); res.Code != 0 {
		t.Fatalf("want exit 0\n%s", res)
	}
	b := browse(t, w, w.out)
	b.do(chromedp.Navigate(b.url+"#/samples?run=1"), chromedp.WaitVisible(chromedp.CSS(`.grid[aria-label="Samples"] .row`)))
	b.do(chromedp.Click(chromedp.CSS(`.grid[aria-label="Samples"] .row`)), chromedp.WaitVisible(chromedp.CSS(`.detail table[aria-label="Agent calls"]`)))
	calls := b.text(`.detail table[aria-label="Agent calls"]`)
	b.shot("agent-calls")
	// Three calls, each to team-key for fake-agent, answered 200 and priced.
	if strings.Count(calls, "team-key") != 3 || strings.Count(calls, "fake-agent") != 3 || strings.Count(calls, "200") < 3 ||
		!regexp.MustCompile(`(?s)(\$0\.0000[1-9]\d.*){3}`).MatchString(calls) || strings.Contains(calls, "unknown") || regexp.MustCompile(`\b(null|undefined|NaN)\b`).MatchString(calls) {
		t.Errorf("the agent's calls:\n%s", calls)
	}
}
