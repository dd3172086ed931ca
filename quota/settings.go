package quota

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/flexiq/flexiq/api"
)

// QueueSettings are one queue's settings (docs/admin-api.md, GET/PUT /v1/queues/{q}).
// Unset fields are nil: no cap, the default attempts, no auto-retry.
type QueueSettings struct {
	MaxConcurrent  *int64
	MaxAttempts    *int64
	DeadRetryAfter *time.Duration
	DeadRetryMax   *int64
}

// TaskSettings are one task's settings.
type TaskSettings struct {
	MaxConcurrent *int64
}

func invalidSetting(kind, format string, args ...any) error {
	return api.InvalidArgument("invalid "+kind+" settings: "+format, args...)
}

// DecodeQueueSettings parses a queue settings document strictly.
func DecodeQueueSettings(data []byte) (QueueSettings, error) {
	var s QueueSettings
	fields, err := settingsObject("queue", data, "max_concurrent", "max_attempts", "dead_retry_after", "dead_retry_max")
	if err != nil {
		return s, err
	}
	for name, raw := range fields {
		if isNull(raw) {
			continue
		}
		switch name {
		case "max_concurrent":
			s.MaxConcurrent, err = settingInt("queue", name, raw, 0)
		case "max_attempts":
			s.MaxAttempts, err = settingInt("queue", name, raw, 1)
		case "dead_retry_max":
			s.DeadRetryMax, err = settingInt("queue", name, raw, 0)
		case "dead_retry_after":
			var text string
			if json.Unmarshal(raw, &text) != nil {
				return s, invalidSetting("queue", "%s: must be a duration such as \"1h\" or \"30s\", got %s", name, raw)
			}
			d, perr := time.ParseDuration(text)
			if perr != nil || d < 0 {
				return s, invalidSetting("queue", "%s: must be a duration >= 0 such as \"1h\" or \"30s\", got %q", name, text)
			}
			s.DeadRetryAfter = &d
		}
		if err != nil {
			return s, err
		}
	}
	return s, nil
}

// Encode renders the queue settings; durations as Go prints them ("1h0m0s").
func (s QueueSettings) Encode() []byte {
	m := map[string]any{}
	if s.MaxConcurrent != nil {
		m["max_concurrent"] = *s.MaxConcurrent
	}
	if s.MaxAttempts != nil {
		m["max_attempts"] = *s.MaxAttempts
	}
	if s.DeadRetryAfter != nil {
		m["dead_retry_after"] = s.DeadRetryAfter.String()
	}
	if s.DeadRetryMax != nil {
		m["dead_retry_max"] = *s.DeadRetryMax
	}
	b, _ := json.Marshal(m) // map keys come out sorted
	return b
}

// MarshalJSON renders Encode's form.
func (s QueueSettings) MarshalJSON() ([]byte, error) { return s.Encode(), nil }

// DecodeTaskSettings parses a task settings document strictly.
func DecodeTaskSettings(data []byte) (TaskSettings, error) {
	var s TaskSettings
	fields, err := settingsObject("task", data, "max_concurrent")
	if err != nil {
		return s, err
	}
	if raw, ok := fields["max_concurrent"]; ok && !isNull(raw) {
		s.MaxConcurrent, err = settingInt("task", "max_concurrent", raw, 0)
	}
	return s, err
}

// Encode renders the task settings.
func (s TaskSettings) Encode() []byte {
	if s.MaxConcurrent == nil {
		return []byte("{}")
	}
	return []byte(`{"max_concurrent":` + strconv.FormatInt(*s.MaxConcurrent, 10) + `}`)
}

// MarshalJSON renders Encode's form.
func (s TaskSettings) MarshalJSON() ([]byte, error) { return s.Encode(), nil }

// settingsObject splits a JSON object and refuses keys not in allowed
// (exact, case-sensitive, as for the quota document).
func settingsObject(kind string, data []byte, allowed ...string) (map[string]json.RawMessage, error) {
	trimmed := bytes.TrimLeft(data, jsonSpace)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, invalidSetting(kind, "the document must be a JSON object")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &fields); err != nil {
		return nil, invalidSetting(kind, "the document is not valid JSON: %v", err)
	}
	for name := range fields {
		ok := false
		for _, a := range allowed {
			ok = ok || a == name
		}
		if !ok {
			return nil, invalidSetting(kind, "unknown field %q (fields are %s)", name, strings.Join(allowed, ", "))
		}
	}
	return fields, nil
}

func settingInt(kind, name string, raw json.RawMessage, min int64) (*int64, error) {
	n, err := strconv.ParseInt(string(bytes.TrimSpace(raw)), 10, 64)
	if err != nil || n < min {
		return nil, invalidSetting(kind, "%s: must be an integer >= %d, got %s", name, min, bytes.TrimSpace(raw))
	}
	return &n, nil
}
