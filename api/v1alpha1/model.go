package v1alpha1

import (
	"net/url"
	"strings"
)

// NeedsAPIKey reports whether a model must be given a key: it declares apiKey,
// or it talks to OpenAI's or Anthropic's own API (a local OpenAI-compatible
// server usually needs none). The controller refuses such a model without a
// Secret, and the runner refuses to call it without a key.
func (m *Model) NeedsAPIKey() bool {
	return m.APIKey != nil || (m.Provider != ProviderAgent && officialAPI(m.BaseURL))
}

// officialAPI reports whether baseURL is OpenAI's or Anthropic's own API, which
// always needs a key (whatever its path or trailing slash).
func officialAPI(baseURL string) bool {
	if baseURL == "" {
		return true // the default endpoint
	}
	u, err := url.Parse(baseURL)
	if err != nil {
		return false
	}
	for _, def := range []string{DefaultOpenAIBaseURL, DefaultAnthropicBaseURL} {
		if d, _ := url.Parse(def); strings.EqualFold(u.Hostname(), d.Hostname()) {
			return true
		}
	}
	return false
}
