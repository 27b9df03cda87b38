package config

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// Secrets never appear in an error message or in Redacted output. Three layers keep them
// out:
//
//   - at the source: a message about a key that is a secret, or a section that holds one
//     (redis, kafka.sasl, admin…), describes the value's type, never the value; a message
//     about amqp.url, a redis.addrs or a kafka.brokers entry shows it with its userinfo
//     masked (maskURL, maskAddr);
//   - validation refuses credentials where they do not belong (userinfo in redis.addrs or
//     kafka.brokers) and an amqp.url that has no scheme or does not parse, since neither
//     could be masked reliably later;
//   - as a backstop, Load replaces every secret value it has seen in any source (also the
//     text of secret keys in a YAML file that did not parse) in every message it returns.
//     Values shorter than minScrub, and occurrences inside a longer word, are left to the
//     first two layers, since masking every "ab" in a message would make it unreadable.

// secretKeys are the keys whose whole value is a secret.
var secretKeyList = []string{"redis.password", "redis.sentinel_password", "kafka.sasl.password", "admin.token"}

// credentialKeys hold a URL or address whose userinfo, if any, is a secret.
var credentialKeys = []string{"amqp.url", "redis.addrs", "kafka.brokers"}

// minScrub is the shortest secret the backstop replaces in messages.
const minScrub = 4

// SecretKeys returns the keys whose value is a secret (masked by Redacted and never shown
// in an error). The password inside amqp.url is masked too.
func SecretKeys() []string { return slices.Clone(secretKeyList) }

// plainKey strips list indexes: redis.addrs[0] -> redis.addrs.
func plainKey(key string) string {
	if !strings.Contains(key, "[") {
		return key
	}
	var b strings.Builder
	skip := false
	for _, r := range key {
		switch {
		case r == '[':
			skip = true
		case r == ']':
			skip = false
		case !skip:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// hidesValue reports whether a message about key must not show its value: key is a
// secret, a section holding one, or a key holding credentials.
func hidesValue(key string) bool {
	k := plainKey(key)
	for _, s := range secretKeyList {
		if k == s || strings.HasPrefix(s, k+".") || strings.HasPrefix(k, s+".") {
			return true
		}
	}
	return slices.Contains(credentialKeys, k)
}

// kindOf describes a value by its type only.
func kindOf(v any) string {
	switch v.(type) {
	case map[string]any:
		return "a section"
	case []any:
		return "a list"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return "a number"
}

// shown is how a message about key displays the value v.
func shown(key string, v any) string {
	if hidesValue(key) {
		return kindOf(v) + " (value not shown: it may hold a secret)"
	}
	return describe(v)
}

// maskURL returns s with the password of its userinfo masked. A string that has an '@'
// but does not parse as a URL with a scheme is masked up to its last '@'; one that does not
// parse at all and has no '@' is masked whole after its scheme, since where the password
// sits cannot be told.
func maskURL(s string) string {
	if s == "" {
		return s
	}
	u, err := url.Parse(s)
	if err == nil && u.Scheme != "" && strings.Contains(s, "://") {
		if u.User == nil {
			return s
		}
		if _, has := u.User.Password(); !has {
			return s
		}
		u.User = url.UserPassword(u.User.Username(), Mask)
		// url escapes '*' in userinfo on some versions; keep the mask readable.
		return strings.ReplaceAll(u.String(), url.QueryEscape(Mask), Mask)
	}
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		scheme, rest = "", s
	} else {
		scheme += "://"
	}
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		return scheme + Mask + rest[i:]
	}
	if err != nil {
		return scheme + Mask
	}
	return s
}

// maskAddr masks the userinfo of a host:port address (anything before its last '@').
func maskAddr(s string) string {
	if i := strings.LastIndex(s, "@"); i >= 0 {
		return Mask + s[i:]
	}
	return s
}

// validateCredentials checks the keys that may carry credentials. usesAMQP says whether a
// route or the dead-letter store uses RabbitMQ.
func (c *Config) validateCredentials(usesAMQP bool, p *problems) {
	for i, a := range c.Redis.Addrs {
		key := fmt.Sprintf("redis.addrs[%d]", i)
		switch {
		case strings.Contains(a, "://"):
			p.add(key, "want host:port without a scheme, got %q (set TLS with redis.tls.enabled, the database with redis.db)", maskURL(a))
		case strings.Contains(a, "@"):
			p.add(key, "want host:port without credentials, got %q (set them in redis.username and redis.password)", maskAddr(a))
		case !strings.Contains(a, ":"):
			p.add(key, "want host:port, got %q", a)
		}
	}
	for i, b := range c.Kafka.Brokers {
		if strings.Contains(b, "@") {
			p.add(fmt.Sprintf("kafka.brokers[%d]", i), "want host:port without credentials, got %q (set them in kafka.sasl)", maskAddr(b))
		}
	}
	u := c.AMQP.URL
	if u == "" && !usesAMQP {
		return
	}
	if !strings.Contains(u, "://") {
		p.add("amqp.url", "must start with amqp:// or amqps:// (value not shown: it may hold a password)")
		return
	}
	if _, err := url.Parse(u); err != nil {
		p.add("amqp.url", "is not a valid URL, got %q (percent-encode reserved characters such as @ : / # ? %% in the user name and password)", maskURL(u))
		return
	}
	if usesAMQP && !strings.HasPrefix(u, "amqp://") && !strings.HasPrefix(u, "amqps://") {
		p.add("amqp.url", "must start with amqp:// or amqps://, got %q", maskURL(u))
	}
}

// ---- the backstop --------------------------------------------------------------------

// secretSet collects secret values seen while loading.
type secretSet map[string]bool

func (s secretSet) add(v string) {
	if v = strings.TrimSpace(v); len(v) >= minScrub {
		s[v] = true
	}
}

// addValue adds the secret parts of value v found under key: the whole value (every leaf
// of a list or section) of a secret key, the userinfo of a credential key.
func (s secretSet) addValue(key string, v any) {
	k := plainKey(key)
	switch x := v.(type) {
	case map[string]any:
		for name, e := range x {
			s.addValue(joinKey(key, name), e)
		}
		return
	case []any:
		for _, e := range x {
			s.addValue(key, e)
		}
		return
	case []string: // a default
		for _, e := range x {
			s.addValue(key, e)
		}
		return
	case nil:
		return
	}
	text := fmt.Sprint(v)
	switch {
	case slices.Contains(credentialKeys, k):
		s.addUserinfo(text)
	case hidesValue(k):
		s.add(text)
	}
}

// addUserinfo adds the userinfo of an address or URL, and the password in it.
func (s secretSet) addUserinfo(text string) {
	for _, item := range strings.Split(text, ",") {
		_, rest, ok := strings.Cut(item, "://")
		if !ok {
			rest = item
		}
		i := strings.LastIndex(rest, "@")
		if i < 0 {
			continue
		}
		userinfo := rest[:i]
		s.add(userinfo)
		if _, pw, ok := strings.Cut(userinfo, ":"); ok {
			s.add(pw)
			if dec, err := url.PathUnescape(pw); err == nil {
				s.add(dec)
			}
		}
	}
}

// addSetting adds the value of one environment variable or flag when its path is, holds
// or lies under a secret or credential key.
func (s secretSet) addSetting(parts []string, value string) {
	if key := strings.Join(parts, "."); hidesValue(key) {
		s.addValue(key, value)
	}
}

// yamlSecretLine finds "password: X", "token: X", "url: X" and "addrs: X" in YAML text,
// block or flow style, so a file that does not parse still has its secrets masked.
var yamlSecretLine = regexp.MustCompile(`(?m)\b(password|sentinel_password|token|url|addrs|brokers)\s*:\s*(?:!!\S+\s+)?([^\n]+)`)

// addYAMLText adds the secrets found lexically in a YAML file.
func (s secretSet) addYAMLText(text string) {
	for _, m := range yamlSecretLine.FindAllStringSubmatch(text, -1) {
		v := strings.TrimSpace(m[2])
		if m[1] == "url" || m[1] == "addrs" || m[1] == "brokers" {
			s.addUserinfo(strings.Trim(v, `"'[]{} `))
			continue
		}
		// In flow style the value ends at ',' or '}'.
		if i := strings.IndexAny(v, ",}"); i >= 0 && !strings.HasPrefix(v, `"`) && !strings.HasPrefix(v, "'") {
			v = v[:i]
		}
		v = strings.TrimSpace(strings.SplitN(v, " #", 2)[0])
		s.add(strings.Trim(v, `"'[]{} `))
		s.add(v)
	}
}

// yamlQuoted matches the `text` yaml quotes in its error messages.
var yamlQuoted = regexp.MustCompile("`[^`]*`")

// scrubYAMLError masks the values a YAML syntax error quotes.
func scrubYAMLError(msg string) string {
	return yamlQuoted.ReplaceAllString(msg, "`"+Mask+"`")
}

// scrub replaces every collected secret in msg, longest first. An occurrence inside a
// longer word is left ("pass" in "password"): a secret shown in a message stands apart
// from the words around it.
func (s secretSet) scrub(msg string) string {
	vals := slices.Collect(maps.Keys(s))
	slices.SortFunc(vals, func(a, b string) int { return cmp.Or(len(b)-len(a), strings.Compare(a, b)) })
	for _, v := range vals {
		msg = replaceWord(msg, v)
	}
	return msg
}

// replaceWord replaces each occurrence of v in msg that does not continue a word on
// either side with Mask.
func replaceWord(msg, v string) string {
	var b strings.Builder
	for {
		i := strings.Index(msg, v)
		if i < 0 {
			b.WriteString(msg)
			return b.String()
		}
		end := i + len(v)
		joined := (i > 0 && isWordByte(msg[i-1]) && isWordByte(v[0])) ||
			(end < len(msg) && isWordByte(msg[end]) && isWordByte(v[len(v)-1]))
		if joined {
			b.WriteString(msg[:i+1])
			msg = msg[i+1:]
			continue
		}
		b.WriteString(msg[:i])
		b.WriteString(Mask)
		msg = msg[end:]
	}
}

func isWordByte(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

// joinScrubbed masks secrets in every FieldError of errs and joins them.
func (s secretSet) joinScrubbed(errs []error) error {
	for _, e := range errs {
		for _, fe := range FieldErrors(e) {
			fe.Msg = s.scrub(fe.Msg)
			fe.Source = s.scrub(fe.Source)
		}
	}
	return errors.Join(errs...)
}

// ---- output ----------------------------------------------------------------------

// Redacted returns a copy of c with secrets masked: redis.password, redis.sentinel_password,
// kafka.sasl.password, admin.token, the password inside amqp.url and any userinfo in
// redis.addrs and kafka.brokers (which validation refuses). Empty secrets stay empty, so
// the output still shows whether one is set.
func Redacted(c Config) Config {
	mask := func(s string) string {
		if s == "" {
			return ""
		}
		return Mask
	}
	c.Redis.Password = mask(c.Redis.Password)
	c.Redis.SentinelPassword = mask(c.Redis.SentinelPassword)
	c.Kafka.SASL.Password = mask(c.Kafka.SASL.Password)
	c.Admin.Token = mask(c.Admin.Token)
	c.AMQP.URL = maskURL(c.AMQP.URL)
	// Do not share the routes' backing array and endpoint pointers with the caller.
	c.Routes = cloneRoutes(c.Routes)
	c.Schedules = cloneSchedules(c.Schedules)
	c.Redis.Addrs = maskAll(c.Redis.Addrs)
	c.Kafka.Brokers = maskAll(c.Kafka.Brokers)
	return c
}

func maskAll(addrs []string) []string {
	out := slices.Clone(addrs)
	for i, a := range out {
		if strings.Contains(a, "://") {
			out[i] = maskURL(a)
		} else {
			out[i] = maskAddr(a)
		}
	}
	return out
}
