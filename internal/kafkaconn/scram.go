package kafkaconn

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"strings"

	"github.com/segmentio/kafka-go/sasl"
)

// SCRAM (RFC 5802/7677) client for Kafka's SCRAM-SHA-256 and SCRAM-SHA-512, implementing
// kafka-go's sasl.Mechanism. kafka-go's own sasl/scram package wraps github.com/xdg-go/scram,
// which is not a dependency of this module; the exchange is small enough to carry here on
// top of the standard library. As in the Java client, the password is used as its UTF-8
// bytes (no SASLprep normalisation), no channel binding ("n,,"), no authzid.

// ScramError is a SCRAM exchange failure (the server rejected us or proved nothing).
type ScramError struct{ Msg string }

func (e *ScramError) Error() string { return "sasl scram: " + e.Msg }

// minScramIterations is Kafka's own lower bound; a server asking for fewer is suspicious.
const minScramIterations = 4096

type scramMechanism struct {
	name     string
	newHash  func() hash.Hash
	user     string
	password string
}

func newScram(name, user, password string) (sasl.Mechanism, error) {
	if user == "" {
		return nil, fmt.Errorf("sasl.username: required for %s", name)
	}
	m := &scramMechanism{name: name, user: user, password: password, newHash: sha256.New}
	if name == MechanismScramSHA512 {
		m.newHash = sha512.New
	}
	return m, nil
}

func (m *scramMechanism) Name() string { return m.name }

func (m *scramMechanism) Start(context.Context) (sasl.StateMachine, []byte, error) {
	nonce := make([]byte, 24)
	if _, err := rand.Read(nonce); err != nil {
		return nil, nil, fmt.Errorf("sasl scram: nonce: %w", err)
	}
	s := &scramSession{m: m, clientNonce: base64.RawStdEncoding.EncodeToString(nonce)}
	s.clientFirstBare = "n=" + saslName(m.user) + ",r=" + s.clientNonce
	return s, []byte("n,," + s.clientFirstBare), nil
}

type scramSession struct {
	m               *scramMechanism
	clientNonce     string
	clientFirstBare string
	serverSignature []byte
	step            int
}

func (s *scramSession) Next(_ context.Context, challenge []byte) (bool, []byte, error) {
	s.step++
	switch s.step {
	case 1:
		resp, err := s.clientFinal(string(challenge))
		return false, resp, err
	case 2:
		attrs, err := scramAttrs(string(challenge))
		if err != nil {
			return false, nil, err
		}
		if e, ok := attrs['e']; ok {
			return false, nil, &ScramError{Msg: "server rejected authentication: " + e}
		}
		v, err := base64.StdEncoding.DecodeString(attrs['v'])
		if err != nil || len(v) == 0 || subtle.ConstantTimeCompare(v, s.serverSignature) != 1 {
			return false, nil, &ScramError{Msg: "server signature mismatch"}
		}
		return true, nil, nil
	}
	return false, nil, &ScramError{Msg: "unexpected challenge after completion"}
}

func (s *scramSession) clientFinal(serverFirst string) ([]byte, error) {
	attrs, err := scramAttrs(serverFirst)
	if err != nil {
		return nil, err
	}
	if e, ok := attrs['e']; ok {
		return nil, &ScramError{Msg: "server rejected authentication: " + e}
	}
	if _, ok := attrs['m']; ok {
		return nil, &ScramError{Msg: "server requires an unsupported extension"}
	}
	nonce := attrs['r']
	if !strings.HasPrefix(nonce, s.clientNonce) || len(nonce) == len(s.clientNonce) {
		return nil, &ScramError{Msg: "server nonce does not extend the client nonce"}
	}
	salt, err := base64.StdEncoding.DecodeString(attrs['s'])
	if err != nil || len(salt) == 0 {
		return nil, &ScramError{Msg: "bad salt"}
	}
	iter, err := strconv.Atoi(attrs['i'])
	if err != nil || iter < minScramIterations || iter > 1<<24 {
		return nil, &ScramError{Msg: fmt.Sprintf("bad iteration count %q", attrs['i'])}
	}
	h := s.m.newHash
	salted, err := pbkdf2.Key(h, s.m.password, salt, iter, h().Size())
	if err != nil {
		return nil, fmt.Errorf("sasl scram: %w", err)
	}
	clientKey := hmacOf(h, salted, "Client Key")
	storedKey := h()
	storedKey.Write(clientKey)
	withoutProof := "c=biws,r=" + nonce // biws = base64("n,,")
	authMessage := s.clientFirstBare + "," + serverFirst + "," + withoutProof
	clientSig := hmacOf(h, storedKey.Sum(nil), authMessage)
	proof := make([]byte, len(clientKey))
	for i := range clientKey {
		proof[i] = clientKey[i] ^ clientSig[i]
	}
	s.serverSignature = hmacOf(h, hmacOf(h, salted, "Server Key"), authMessage)
	return []byte(withoutProof + ",p=" + base64.StdEncoding.EncodeToString(proof)), nil
}

func hmacOf(h func() hash.Hash, key []byte, msg string) []byte {
	mac := hmac.New(h, key)
	mac.Write([]byte(msg))
	return mac.Sum(nil)
}

// saslName escapes a username per RFC 5802: "=" as "=3D", "," as "=2C".
func saslName(u string) string {
	return strings.NewReplacer("=", "=3D", ",", "=2C").Replace(u)
}

// scramAttrs parses "a=value,b=value" into single-letter attributes.
func scramAttrs(msg string) (map[byte]string, error) {
	out := map[byte]string{}
	for _, part := range bytes.Split([]byte(msg), []byte(",")) {
		if len(part) < 2 || part[1] != '=' {
			return nil, &ScramError{Msg: fmt.Sprintf("malformed server message %q", msg)}
		}
		if _, dup := out[part[0]]; !dup {
			out[part[0]] = string(part[2:])
		}
	}
	if len(out) == 0 {
		return nil, errors.New("sasl scram: empty server message")
	}
	return out, nil
}
