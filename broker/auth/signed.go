package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/frontend"
	"github.com/picomq/picomq/broker/httpapi/wire"
)

// Signed read URLs. A holder of a write or admin token asks a broker to
// sign a read of one stream (or of the names under a prefix) until an
// expiry (POST /v1/sign); the answer is the stream's URL with four query
// parameters, which a browser can then read and live-tail with no token:
//
//	picomq-scope  the stream name, or a prefix ending in '/'
//	picomq-exp    the expiry, Unix seconds
//	picomq-key    the id of the key that signed (a file's name)
//	picomq-sig    base64url(HMAC-SHA256(key, "picomq-read-v1\n" + scope + "\n" + exp))
//
// Every broker holds the same keys (a Secret mounted on each), so any one
// verifies what another signed. Rotation: add the new key (every key in
// the directory verifies; the last by name signs), wait out the longest
// expiry, remove the old one.
const (
	ParamScope = "picomq-scope"
	ParamExp   = "picomq-exp"
	ParamKey   = "picomq-key"
	ParamSig   = frontend.SignatureParam
	// SignPath is the route that mints a signed URL.
	SignPath = wire.SignPath
	// MaxSignedFor bounds how far ahead a URL may expire: a URL cannot be
	// revoked but by removing its key.
	MaxSignedFor = 7 * 24 * time.Hour
	// MinKeyBytes is the shortest signing key accepted.
	MinKeyBytes = 32
)

// The refusals of signed URLs.
var (
	SignedURLExpired = errs.Static(0x00_10_09_04, "SIGNED_URL_EXPIRED",
		"The signed URL has expired",
		"A signed read URL is valid until its picomq-exp (Unix seconds); ask for a new one (POST /v1/sign, picomq sign). Fields expiredAt and now say when.",
		401, 77)
	SignedURLInvalid = errs.Static(0x00_10_09_05, "SIGNED_URL_INVALID",
		"The signed URL does not verify",
		"Its signature does not match its scope and expiry under the key it names, the key is not (or no longer) among the brokers' --url-signing-keys-dir, a parameter is missing, or the URL is used for something other than reading the streams its scope covers. Field reason says which.",
		401, 77)
)

type signingKey struct {
	id     string
	secret []byte
}

// SigningKeys are the keys of a directory, re-read as it changes; sorted
// by id (file name).
type SigningKeys struct {
	dirSet[signingKey]
}

// LoadSigningKeys reads dir's keys; a file that is not a key is skipped
// and logged by name.
func LoadSigningKeys(dir string, log *slog.Logger) (*SigningKeys, error) {
	k := &SigningKeys{}
	if err := k.init(dir, "url signing key", "keys", log, loadKey); err != nil {
		return nil, err
	}
	return k, nil
}

// loadKey reads one key file: its name is the key's id.
func loadKey(path, name string) (signingKey, error) {
	if !validKeyID(name) {
		return signingKey{}, fmt.Errorf("its name is not a key id (letters, digits, '.', '_', '-')")
	}
	secret, err := readKey(path)
	if err != nil {
		return signingKey{}, err
	}
	return signingKey{id: name, secret: secret}, nil
}

func readKey(path string) ([]byte, error) {
	buf, err := readSmall(path)
	if err != nil {
		return nil, err
	}
	buf = []byte(strings.TrimRight(string(buf), "\r\n"))
	if len(buf) < MinKeyBytes {
		return nil, fmt.Errorf("a key holds %d to %d bytes", MinKeyBytes, maxTokenFileBytes)
	}
	return buf, nil
}

func validKeyID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, c := range []byte(id) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func mac(secret []byte, scope string, exp int64) string {
	m := hmac.New(sha256.New, secret)
	fmt.Fprintf(m, "picomq-read-v1\n%s\n%d", scope, exp)
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// Sign returns the query parameters that let a bearer read what scope
// covers (a stream name, or a prefix ending in '/') until exp, signed with
// the last key by id. ok is false when there is no key.
func (k *SigningKeys) Sign(scope string, exp time.Time) (url.Values, bool) {
	set := k.items()
	if len(set) == 0 {
		return nil, false
	}
	key := set[len(set)-1]
	e := exp.Unix()
	return url.Values{ParamScope: {scope}, ParamExp: {strconv.FormatInt(e, 10)}, ParamKey: {key.id}, ParamSig: {mac(key.secret, scope, e)}}, true
}

// HasSignature reports whether a query carries a signed URL's signature.
func HasSignature(q url.Values) bool { return q.Has(ParamSig) }

// Verify checks a signed URL's parameters at now and returns the scope
// they grant reading.
func (k *SigningKeys) Verify(q url.Values, now time.Time) (string, *errs.Error) {
	scope, expS, id, sig := q.Get(ParamScope), q.Get(ParamExp), q.Get(ParamKey), q.Get(ParamSig)
	if scope == "" || expS == "" || id == "" || sig == "" {
		return "", SignedURLInvalid.With("reason", "picomq-scope, picomq-exp, picomq-key and picomq-sig all needed")
	}
	for _, p := range []string{ParamScope, ParamExp, ParamKey, ParamSig} {
		if len(q[p]) != 1 {
			return "", SignedURLInvalid.With("reason", p+" given more than once")
		}
	}
	exp, err := strconv.ParseInt(expS, 10, 64)
	if err != nil {
		return "", SignedURLInvalid.With("reason", "picomq-exp is not Unix seconds")
	}
	var key *signingKey
	for _, c := range k.items() {
		if c.id == id {
			key = &c
			break
		}
	}
	if key == nil {
		return "", SignedURLInvalid.With("reason", "unknown key", "key", id)
	}
	if !hmac.Equal([]byte(mac(key.secret, scope, exp)), []byte(sig)) {
		return "", SignedURLInvalid.With("reason", "signature does not match", "key", id)
	}
	// Checked after the signature: an expiry is told only to a URL the
	// brokers signed.
	if now.Unix() >= exp {
		return "", SignedURLExpired.With("expiredAt", time.Unix(exp, 0).UTC().Format(time.RFC3339), "now", now.UTC().Format(time.RFC3339))
	}
	return scope, nil
}
