package compile_test

import (
	"testing"
)

// TestDataChecks covers what Build checks against the data before any call:
// field mappings that name no field, prompts that would all be empty, and
// duplicate ids.
func TestDataChecks(t *testing.T) {
	agentNoPrompt := "models:\n- name: bot\n  provider: agent\n  agent: {command: [/bin/cat, \"{{ .Workspace }}/task.md\"], files: {task.md: \"{{ .Sample.question }}\"}}\n"
	tests := []struct {
		name   string
		file   string
		data   string
		extra  string // dataset fields
		models string // default localModel
		prompt string
		// wantPrefix is "" when Build must succeed.
		wantPrefix string
		want       []string
	}{
		{
			name:       "csv without fields: no input column",
			file:       "qa.csv",
			data:       "id,question,answer\nq1,2+2?,4\nq2,3+3?,6\n",
			wantPrefix: "spec.datasets[0].fields.input:",
			want:       []string{`no record has a field "input"`, `"answer", "id", "question"`},
		},
		{
			name:       "typo in fields.input",
			file:       "qa.csv",
			data:       "id,question,answer\nq1,2+2?,4\n",
			extra:      "fields: {input: questoin, expected: answer}",
			wantPrefix: "spec.datasets[0].fields.input:",
			want:       []string{`"questoin"`, `"answer", "id", "question"`},
		},
		{
			name:       "typo in fields.expected",
			file:       "qa.jsonl",
			data:       `{"id":"q1","question":"2+2?","answer":"4"}` + "\n",
			extra:      "fields: {input: question, expected: anwser}",
			wantPrefix: "spec.datasets[0].fields.expected:",
			want:       []string{`"anwser"`},
		},
		{
			name:  "a field only later records have is found",
			file:  "qa.jsonl",
			data:  `{"id":"q1","question":"2+2?"}` + "\n" + `{"id":"q2","question":"3+3?","answer":"6"}` + "\n",
			extra: "fields: {input: question, expected: answer}",
		},
		{
			name:  "correct mapping",
			file:  "qa.csv",
			data:  "id,question,answer\nq1,2+2?,4\n",
			extra: "fields: {input: question, expected: answer}",
		},
		{
			name:   "a template naming the field needs no mapping",
			file:   "qa.csv",
			data:   "id,question,answer\nq1,2+2?,4\n",
			prompt: "prompt: {template: \"{{ .Sample.question }}\"}\n",
		},
		{
			name:       "input column present but every input empty",
			file:       "qa.csv",
			data:       "id,input\nq1,\nq2, \n",
			wantPrefix: "spec.prompt.template:",
			want:       []string{"empty prompt", `"data"`},
		},
		{
			name: "some empty inputs are per-sample errors, not a refusal",
			file: "qa.csv",
			data: "id,input\nq1,\nq2,2+2?\n",
		},
		{
			name:   "an agent that does not read the prompt needs no input",
			file:   "qa.csv",
			data:   "id,question\nq1,2+2?\n",
			models: agentNoPrompt,
		},
		{
			name:       "duplicate ids",
			file:       "qa.jsonl",
			data:       `{"id":"q1","input":"a"}` + "\n" + `{"id":"q2","input":"b"}` + "\n" + `{"id":"q1","input":"c"}` + "\n",
			wantPrefix: "spec.datasets[0]: line 3:",
			want:       []string{`id "q1" is already the id of line 1`},
		},
		{
			name:  "a duplicate past the limit does not count",
			file:  "qa.jsonl",
			data:  `{"id":"q1","input":"a"}` + "\n" + `{"id":"q2","input":"b"}` + "\n" + `{"id":"q1","input":"c"}` + "\n",
			extra: "limit: 2",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newEnv(t, nil)
			writeFile(t, env.BaseDir, tt.file, []byte(tt.data))
			models := tt.models
			if models == "" {
				models = localModel
			}
			_, err := build(t, fileDataset(tt.file, tt.extra)+models+tt.prompt, env)
			if tt.wantPrefix == "" {
				if err != nil {
					t.Fatalf("Build: %v", err)
				}
				return
			}
			wantError(t, err, tt.wantPrefix, tt.want...)
		})
	}
}

func TestDuplicateInlineIDs(t *testing.T) {
	spec := "datasets:\n- name: qa\n  source:\n    inline:\n    - {id: q1, input: a}\n    - {id: q1, input: b}\n" + localModel
	_, err := build(t, spec, newEnv(t, nil))
	wantError(t, err, "spec.datasets[0]: item 2:", `id "q1" is already the id of item 1`)
}
