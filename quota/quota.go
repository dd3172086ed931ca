// Package quota is the namespace quota document of docs/quotas.md: strict decoding,
// validation, merging, canonical encoding, the storage key and namespace
// names. It does no IO, so every rule here is a plain function to test.
package quota

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/flexiq/flexiq/api"
)

// OnExcess says what an over-quota enqueue does.
type OnExcess string

// The on_excess values. The empty value means reject.
const (
	Reject OnExcess = "reject"
	Drop   OnExcess = "drop"
)

// Rate is an enqueue_rate: Count jobs per Unit.
type Rate struct {
	Count int64
	Unit  time.Duration
	// Text is the rate as written, for messages ("500/s").
	Text string
}

// Document is one namespace's quota. A nil pointer is an unset limit
// (unlimited); zero is a real limit.
type Document struct {
	MaxPending      *int64
	OnExcess        OnExcess // "" = reject
	EnqueueRate     *Rate
	MaxRunning      *int64
	MaxArchivedRows *int64
	MaxDeadRows     *int64
}

// Field names, exactly as the document spells them.
const (
	FieldMaxPending      = "max_pending"
	FieldOnExcess        = "on_excess"
	FieldEnqueueRate     = "enqueue_rate"
	FieldMaxRunning      = "max_running"
	FieldMaxArchivedRows = "max_archived_rows"
	FieldMaxDeadRows     = "max_dead_rows"
)

// Fields lists the document's fields in canonical order.
var Fields = []string{
	FieldMaxPending, FieldOnExcess, FieldEnqueueRate,
	FieldMaxRunning, FieldMaxArchivedRows, FieldMaxDeadRows,
}

// IsField reports whether name is a document field (exact, case-sensitive).
func IsField(name string) bool {
	for _, f := range Fields {
		if f == name {
			return true
		}
	}
	return false
}

// Excess returns the effective on_excess (reject when unset).
func (d Document) Excess() OnExcess {
	if d.OnExcess == "" {
		return Reject
	}
	return d.OnExcess
}

// IsEmpty reports whether no field is set.
func (d Document) IsEmpty() bool {
	return d == Document{}
}

// Equal reports whether a and b set the same limits to the same values.
func (a Document) Equal(b Document) bool {
	return bytes.Equal(a.Encode(), b.Encode())
}

func invalid(format string, args ...any) error {
	return api.Errorf(api.CodeInvalidArgument, api.ReasonInvalidQuota, "invalid quota: "+format, args...)
}

// Decode parses a stored or submitted document strictly: a JSON object whose
// keys are exactly the document's field names. A null value leaves the field
// unset. Every error is INVALID_ARGUMENT / INVALID_QUOTA and names the field.
func Decode(data []byte) (Document, error) {
	fields, err := decodeObject(data)
	if err != nil {
		return Document{}, err
	}
	var d Document
	for _, name := range sortedKeys(fields) {
		if err := d.set(name, fields[name]); err != nil {
			return Document{}, err
		}
	}
	return d, nil
}

// decodeObject splits a JSON object into raw fields without encoding/json's
// case-insensitive matching, which would take MAX_PENDING for max_pending.
func decodeObject(data []byte) (map[string]json.RawMessage, error) {
	// Only JSON's own whitespace may surround the object: bytes.TrimSpace
	// would also take \v, \f, U+0085 and U+00A0, which JSON does not allow.
	trimmed := bytes.TrimLeft(data, jsonSpace)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, invalid("the document must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.UseNumber()
	fields := map[string]json.RawMessage{}
	if _, err := dec.Token(); err != nil { // {
		return nil, invalid("the document is not valid JSON: %v", err)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, invalid("the document is not valid JSON: %v", err)
		}
		key, ok := tok.(string)
		if !ok {
			return nil, invalid("the document is not valid JSON")
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, invalid("%s: not valid JSON: %v", key, err)
		}
		if !IsField(key) {
			return nil, invalid("unknown field %q (fields are %s)", key, strings.Join(Fields, ", "))
		}
		if _, dup := fields[key]; dup {
			return nil, invalid("%s: given twice", key)
		}
		fields[key] = raw
	}
	if _, err := dec.Token(); err != nil { // }
		return nil, invalid("the document is not valid JSON: %v", err)
	}
	// Anything but whitespace after the object is refused. dec.More and
	// dec.Token cannot tell: More is false before a stray '}' or ']' and
	// Token then fails, so "{}}" would pass.
	if rest := bytes.TrimLeft(trimmed[dec.InputOffset():], jsonSpace); len(rest) != 0 {
		return nil, invalid("the document is not valid JSON: data after the object")
	}
	return fields, nil
}

// jsonSpace is the whitespace JSON allows between tokens (RFC 8259 §2).
const jsonSpace = " \t\r\n"

func sortedKeys(m map[string]json.RawMessage) []string {
	keys := make([]string, 0, len(m))
	for _, f := range Fields {
		if _, ok := m[f]; ok {
			keys = append(keys, f)
		}
	}
	return keys
}

func isNull(raw json.RawMessage) bool {
	return bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

// set applies one raw field to d; null unsets it.
func (d *Document) set(name string, raw json.RawMessage) error {
	if isNull(raw) {
		d.unset(name)
		return nil
	}
	switch name {
	case FieldMaxPending, FieldMaxRunning, FieldMaxArchivedRows, FieldMaxDeadRows:
		n, err := decodeLimit(name, raw)
		if err != nil {
			return err
		}
		*d.limit(name) = &n
	case FieldOnExcess:
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return invalid("%s: must be \"reject\" or \"drop\", got %s", name, raw)
		}
		switch OnExcess(s) {
		case Reject, Drop:
			d.OnExcess = OnExcess(s)
		default:
			return invalid("%s: must be \"reject\" or \"drop\", got %q", name, s)
		}
	case FieldEnqueueRate:
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return invalid("%s: must be a string <count>/<unit> with count >= 1 and unit s, m or h, got %s", name, raw)
		}
		r, err := ParseRate(s)
		if err != nil {
			return err
		}
		d.EnqueueRate = &r
	default:
		return invalid("unknown field %q (fields are %s)", name, strings.Join(Fields, ", "))
	}
	return nil
}

func (d *Document) limit(name string) **int64 {
	switch name {
	case FieldMaxPending:
		return &d.MaxPending
	case FieldMaxRunning:
		return &d.MaxRunning
	case FieldMaxArchivedRows:
		return &d.MaxArchivedRows
	case FieldMaxDeadRows:
		return &d.MaxDeadRows
	}
	return nil
}

func (d *Document) unset(name string) {
	switch name {
	case FieldOnExcess:
		d.OnExcess = ""
	case FieldEnqueueRate:
		d.EnqueueRate = nil
	default:
		if p := d.limit(name); p != nil {
			*p = nil
		}
	}
}

// decodeLimit accepts a JSON integer >= 0 (no fraction, no exponent).
func decodeLimit(name string, raw json.RawMessage) (int64, error) {
	text := string(bytes.TrimSpace(raw))
	n, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		if _, ferr := strconv.ParseFloat(text, 64); ferr == nil && !strings.HasPrefix(text, "\"") {
			if strings.HasPrefix(text, "-") {
				return 0, invalid("%s: must be an integer >= 0, got %s", name, text)
			}
			return 0, invalid("%s: must be an integer >= 0 and at most %d, got %s", name, int64(^uint64(0)>>1), text)
		}
		return 0, invalid("%s: must be an integer >= 0, got %s", name, text)
	}
	if n < 0 {
		return 0, invalid("%s: must be an integer >= 0, got %d", name, n)
	}
	return n, nil
}

// ParseRate parses "<count>/<unit>": count an integer >= 1, unit s, m or h.
func ParseRate(s string) (Rate, error) {
	bad := func() (Rate, error) {
		return Rate{}, invalid("%s: must be <count>/<unit> with count >= 1 and unit s, m or h (e.g. 500/s), got %q", FieldEnqueueRate, s)
	}
	count, unit, ok := strings.Cut(s, "/")
	if !ok || count == "" {
		return bad()
	}
	for _, c := range count {
		if c < '0' || c > '9' {
			return bad()
		}
	}
	n, err := strconv.ParseInt(count, 10, 64)
	if err != nil || n < 1 {
		return bad()
	}
	var u time.Duration
	switch unit {
	case "s":
		u = time.Second
	case "m":
		u = time.Minute
	case "h":
		u = time.Hour
	default:
		return bad()
	}
	return Rate{Count: n, Unit: u, Text: s}, nil
}

// String is the rate as written; a Rate built in code without Text is
// rendered from Count and Unit ("500/s"), so that it encodes to a document
// that decodes and Equal tells different rates apart.
func (r Rate) String() string {
	if r.Text != "" {
		return r.Text
	}
	unit := r.Unit.String()
	switch r.Unit {
	case time.Second:
		unit = "s"
	case time.Minute:
		unit = "m"
	case time.Hour:
		unit = "h"
	}
	return strconv.FormatInt(r.Count, 10) + "/" + unit
}

// Encode renders the canonical JSON: fields in document order, unset fields
// left out, so an empty document is {}.
func (d Document) Encode() []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	sep := func() {
		if b.Len() > 1 {
			b.WriteByte(',')
		}
	}
	num := func(name string, v *int64) {
		if v != nil {
			sep()
			fmt.Fprintf(&b, "%q:%d", name, *v)
		}
	}
	num(FieldMaxPending, d.MaxPending)
	str := func(name, v string) {
		sep()
		text, _ := json.Marshal(v) // JSON quoting: %q's Go escapes (\x00) are not JSON
		fmt.Fprintf(&b, "%q:%s", name, text)
	}
	if d.OnExcess != "" {
		str(FieldOnExcess, string(d.OnExcess))
	}
	if d.EnqueueRate != nil {
		str(FieldEnqueueRate, d.EnqueueRate.String())
	}
	num(FieldMaxRunning, d.MaxRunning)
	num(FieldMaxArchivedRows, d.MaxArchivedRows)
	num(FieldMaxDeadRows, d.MaxDeadRows)
	b.WriteByte('}')
	return b.Bytes()
}

// MarshalJSON renders the canonical form, so a Document can sit inside any
// reply struct.
func (d Document) MarshalJSON() ([]byte, error) { return d.Encode(), nil }

// UnmarshalJSON decodes strictly, like Decode.
func (d *Document) UnmarshalJSON(data []byte) error {
	doc, err := Decode(data)
	if err != nil {
		return err
	}
	*d = doc
	return nil
}

// Merge applies a JSON merge patch (RFC 7386) to d. The document is flat, so
// the patch is an object whose keys replace fields and whose nulls unset
// them. The result is validated as a whole; on error d is returned unchanged.
func (d Document) Merge(patch []byte) (Document, error) {
	fields, err := decodeObject(patch)
	if err != nil {
		return d, err
	}
	out := d
	for _, name := range sortedKeys(fields) {
		if err := out.set(name, fields[name]); err != nil {
			return d, err
		}
	}
	return out, nil
}

// Key is the settings key of ns's document.
func Key(ns string) string {
	if ns == DefaultNamespace {
		return "quota:default"
	}
	return "quota:ns:" + strconv.Itoa(len(ns)) + ":" + ns
}

// KeyPrefix is the reserved settings prefix of every quota document.
const KeyPrefix = "quota:"

// NamespaceFromKey inverts Key; ok is false for a key that is not a quota key.
func NamespaceFromKey(key string) (ns string, ok bool) {
	if key == "quota:default" {
		return DefaultNamespace, true
	}
	rest, found := strings.CutPrefix(key, "quota:ns:")
	if !found {
		return "", false
	}
	lenText, name, found := strings.Cut(rest, ":")
	if !found {
		return "", false
	}
	n, err := strconv.Atoi(lenText)
	// Only the key Key writes: not "quota:ns:04:acme" or "quota:ns:+4:acme"
	// (Atoi takes both), "quota:ns:0:" or "quota:ns:7:default".
	if err != nil || n != len(name) || name == "" || Key(name) != key {
		return "", false
	}
	return name, true
}

// DefaultNamespace is the namespace of the root token.
const DefaultNamespace = "default"

// MaxNamespaceBytes bounds a namespace name.
const MaxNamespaceBytes = 128

// CheckNamespace validates a namespace name: 1–128 bytes of UTF-8 with no
// control characters.
func CheckNamespace(ns string) error {
	if len(ns) == 0 || len(ns) > MaxNamespaceBytes {
		return api.InvalidArgument("namespace: must be 1-%d bytes, got %d", MaxNamespaceBytes, len(ns))
	}
	if !utf8.ValidString(ns) {
		return api.InvalidArgument("namespace: must be valid UTF-8")
	}
	for _, r := range ns {
		if unicode.IsControl(r) {
			return api.InvalidArgument("namespace: must not contain control characters, got %q", ns)
		}
	}
	return nil
}
