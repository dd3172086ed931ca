// Package redact hides the secrets of store and NATS URLs, and FlexiQ
// tokens in free text, from what is printed or logged (docs/security.md:
// a secret is never printed or logged).
package redact

import (
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// Redacted stands in for a secret in messages.
const Redacted = "***"

// URL returns a store or NATS URL fit to print or log (docs/security.md: a
// secret in a URL is never printed or logged): the password of its user
// info (redis://:pw@h, postgres://u:pw@h/db, nats://u:pw@h), a NATS URL's
// token (nats://token@h), and the values of password-like query parameters
// (postgres://h/db?password=pw) or keyword/value settings (PostgreSQL's
// "host=h password=pw") become "***". A comma-separated list of URLs (a
// NATS server list) is redacted URL by URL.
//
// It works on the text rather than on a parse, so that a URL too
// malformed to parse, the very one an error message quotes, is redacted
// too; when in doubt it hides more than the secret rather than less.
func URL(rawURL string) string {
	out, _ := redact(rawURL)
	return out
}

// Error returns err with every secret of rawURL hidden from its
// message (a driver's error may quote the URL it was given, or a part of
// it); errors.Is and errors.As still see err.
func Error(err error, rawURL string) error {
	if err == nil {
		return nil
	}
	_, secrets := redact(rawURL)
	msg := err.Error()
	clean := msg
	for _, s := range secrets {
		clean = strings.ReplaceAll(clean, s, Redacted)
	}
	if clean == msg {
		return err
	}
	return &redactedError{msg: clean, err: err}
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// tokenSchemes are those whose user info without a password is itself a
// secret: nats://<token>@host.
var tokenSchemes = map[string]bool{"nats": true, "tls": true, "ws": true, "wss": true}

// tokenLike is a FlexiQ token or generated secret: "fq_" and its random
// part (auth.NewToken, the generated root token and cluster secret).
var tokenLike = regexp.MustCompile(`fq_[A-Za-z0-9_-]+`)

// Text returns s with each of secrets, and anything shaped like a FlexiQ
// token, replaced by Redacted (the token keeps its "fq_" so a reader
// still sees what was there): for text a library wrote, such as the
// embedded NATS server's reports, which quote what a client sent.
func Text(s string, secrets ...string) string {
	for _, secret := range secrets {
		if secret != "" {
			s = strings.ReplaceAll(s, secret, Redacted)
		}
	}
	return tokenLike.ReplaceAllString(s, "fq_"+Redacted)
}

var (
	// secretParam is a password-like parameter of a URL's query.
	secretParam = regexp.MustCompile(`(?i)([?&](?:password|passwd|pwd|pass|sslpassword|secret|token|auth_token)=)([^&#]*)`)
	// secretSetting is a password of a keyword/value connection string,
	// quoted ('p w', with \' and \\ escapes) or not.
	secretSetting = regexp.MustCompile(`(?i)(\b(?:password|passwd|pwd|sslpassword)\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s]*)`)
)

// redact returns rawURL redacted and the secrets it hid, each as written
// and percent-decoded and -encoded (a driver may quote any of them: Open
// hands go-redis the URL re-encoded).
func redact(rawURL string) (string, []string) {
	var secrets []string
	hide := func(s string) {
		if s == "" {
			return
		}
		secrets = append(secrets, s)
		if d, err := url.PathUnescape(s); err == nil && d != s {
			secrets = append(secrets, d)
		}
		if d, err := url.QueryUnescape(s); err == nil && d != s {
			secrets = append(secrets, d)
		}
		for _, e := range []string{url.PathEscape(s), url.QueryEscape(s), strings.TrimPrefix(url.UserPassword("", s).String(), ":")} {
			if e != s {
				secrets = append(secrets, e)
			}
		}
	}
	parts := splitURLList(rawURL)
	for i, p := range parts {
		parts[i] = redactOne(p, hide)
	}
	// Longest first, so a secret that contains another is replaced whole.
	slices.SortFunc(secrets, func(a, b string) int { return len(b) - len(a) })
	return strings.Join(parts, ","), secrets
}

// splitURLList splits a comma-separated list of URLs. A comma not
// followed by another scheme:// is part of the URL (a password, a list of
// PostgreSQL hosts), so a password with a comma is never split off unseen.
func splitURLList(s string) []string {
	pieces := strings.Split(s, ",")
	out := pieces[:1]
	for _, p := range pieces[1:] {
		if strings.Contains(p, "://") {
			out = append(out, p)
		} else {
			out[len(out)-1] += "," + p
		}
	}
	return out
}

func redactOne(s string, hide func(string)) string {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		// A keyword/value string, or a URL mistyped (postgres:/u:pw@h):
		// whatever lies between its first ':' and last '@' may be a
		// password.
		if colon, at := strings.Index(s, ":"), strings.LastIndex(s, "@"); colon >= 0 && at > colon {
			hide(s[colon+1 : at])
			s = s[:colon+1] + Redacted + s[at:]
		}
		return redactParams(s, secretSetting, hide)
	}
	// The user info ends at the last '@': a raw '@', '/' or '?' in a
	// password must not end it early. An '@' in the query makes the cut
	// later than the user info, which hides more, never less.
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		info := rest[:at]
		if user, pass, hasPass := strings.Cut(info, ":"); hasPass {
			hide(pass)
			info = user + ":" + Redacted
		} else if tokenSchemes[strings.ToLower(scheme)] {
			hide(info)
			info = Redacted
		}
		rest = info + rest[at:]
	}
	return scheme + "://" + redactParams(rest, secretParam, hide)
}

func redactParams(s string, re *regexp.Regexp, hide func(string)) string {
	return re.ReplaceAllStringFunc(s, func(m string) string {
		sub := re.FindStringSubmatch(m)
		hide(strings.Trim(sub[2], "'"))
		return sub[1] + Redacted
	})
}
