package history

import (
	"encoding/json"
	"strings"
)

// ProbeSample is one call of an availability prober (availability.jsonl).
type ProbeSample struct {
	// Node is the node the prober is pinned to: every call goes to it.
	Node       string `json:"node"`
	InvokeNs   int64  `json:"invoke_ns"`
	CompleteNs int64  `json:"complete_ns"`
	OK         bool   `json:"ok"`
	Error      string `json:"error,omitempty"`
}

// ReadProbeSamples reads an availability.jsonl.
func ReadProbeSamples(b []byte) ([]ProbeSample, error) {
	var out []ProbeSample
	for _, line := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		var s ProbeSample
		if err := json.Unmarshal([]byte(line), &s); err != nil {
			return out, err
		}
		out = append(out, s)
	}
	return out, nil
}
