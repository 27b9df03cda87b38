// Package kafkaconn builds the connection settings shared by the Kafka source
// (ingress/kafka, a kafka-go Reader that needs a *kafka.Dialer) and the Kafka sink
// (egress/kafka, produce requests through a *kafka.Transport) from its own Config:
// brokers, TLS (a *tls.Config the caller built) and SASL (PLAIN, SCRAM-SHA-256,
// SCRAM-SHA-512, through kafka-go's sasl/plain and sasl/scram).
//
// Errors retrying cannot fix (a rejected login, an unsupported mechanism, a server
// certificate that does not verify, an invalid Config) are marked fault.Permanent where
// they arise.
package kafkaconn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"

	"github.com/delaybridge/delay-bridge/internal/fault"
)

// DialTimeout bounds connection establishment including the TLS handshake and SASL.
const DialTimeout = 10 * time.Second

// SASL mechanism names accepted in SASL.Mechanism (case-insensitive).
const (
	MechanismPlain       = "PLAIN"
	MechanismScramSHA256 = "SCRAM-SHA-256"
	MechanismScramSHA512 = "SCRAM-SHA-512"
)

// Config is how to reach the Kafka brokers.
type Config struct {
	Brokers []string // at least one host:port
	// TLS, when not nil, is the client TLS configuration (nil: plaintext).
	TLS  *tls.Config
	SASL SASL
	// ClientID names the client to the brokers; default "delay-bridge".
	ClientID string
}

// SASL selects the SASL mechanism; an empty Mechanism disables SASL.
type SASL struct {
	Mechanism string // "", PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
	Username  string
	Password  string
}

// Validate checks c (after defaults); its errors are permanent.
func (c Config) Validate() error {
	if len(c.Brokers) == 0 {
		return fault.Permanent(errors.New("kafka.brokers: at least one broker is required"))
	}
	if _, err := Mechanism(c.SASL); err != nil {
		return fmt.Errorf("kafka.%w", err)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.ClientID == "" {
		c.ClientID = "delay-bridge"
	}
	return c
}

// Mechanism returns the SASL mechanism for c, or nil when c.Mechanism is empty. Its
// errors, and the errors of the exchanges it runs, are permanent.
func Mechanism(c SASL) (sasl.Mechanism, error) {
	var algo scram.Algorithm
	switch strings.ToUpper(c.Mechanism) {
	case "":
		return nil, nil
	case MechanismPlain:
		return plain.Mechanism{Username: c.Username, Password: c.Password}, nil
	case MechanismScramSHA256:
		algo = scram.SHA256
	case MechanismScramSHA512:
		algo = scram.SHA512
	default:
		return nil, fault.Permanent(fmt.Errorf("sasl.mechanism: want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, got %q", c.Mechanism))
	}
	if c.Username == "" {
		return nil, fault.Permanent(fmt.Errorf("sasl.username: required for %s", algo.Name()))
	}
	m, err := scram.Mechanism(algo, c.Username, c.Password)
	if err != nil {
		return nil, fault.Permanent(fmt.Errorf("sasl.password: %w", err))
	}
	return scramMechanism{m}, nil
}

// Dialer returns a kafka-go Dialer (for Readers and admin connections) with the TLS and
// SASL settings of c.
func Dialer(c Config) (*kafka.Dialer, error) {
	c, mech, err := settings(c)
	if err != nil {
		return nil, err
	}
	return &kafka.Dialer{
		ClientID:      c.ClientID,
		Timeout:       DialTimeout,
		DualStack:     true,
		KeepAlive:     30 * time.Second,
		TLS:           c.TLS,
		SASLMechanism: mech,
	}, nil
}

// Transport returns a kafka-go Transport (for the Kafka sink and admin clients) with the TLS
// and SASL settings of c. The caller owns it and releases its connections with
// CloseIdleConnections.
func Transport(c Config) (*kafka.Transport, error) {
	c, mech, err := settings(c)
	if err != nil {
		return nil, err
	}
	d := &net.Dialer{Timeout: DialTimeout, KeepAlive: 30 * time.Second}
	return &kafka.Transport{
		Dial:        d.DialContext,
		DialTimeout: DialTimeout,
		ClientID:    c.ClientID,
		TLS:         c.TLS,
		SASL:        mech,
	}, nil
}

func settings(c Config) (Config, sasl.Mechanism, error) {
	c = c.withDefaults()
	if err := c.Validate(); err != nil {
		return c, nil, err
	}
	mech, err := Mechanism(c.SASL)
	return c, mech, err
}

// Ping connects to the brokers of c in turn (TLS handshake and SASL included) and reads
// the cluster metadata. It returns nil as soon as one broker answers. Errors that
// retrying will not fix (authentication, certificates) are marked fault.Permanent.
func Ping(ctx context.Context, c Config) error {
	d, err := Dialer(c)
	if err != nil {
		return err
	}
	var errs []error
	for _, b := range c.Brokers {
		conn, err := d.DialContext(ctx, "tcp", b)
		if err == nil {
			if dl, ok := ctx.Deadline(); ok {
				_ = conn.SetDeadline(dl)
			} else {
				_ = conn.SetDeadline(time.Now().Add(DialTimeout))
			}
			_, err = conn.Brokers()
			conn.Close()
		}
		if err == nil {
			return nil
		}
		errs = append(errs, fmt.Errorf("kafka broker %s: %w", b, classify(err)))
		if ctx.Err() != nil {
			break
		}
	}
	return errors.Join(errs...)
}

// classify marks the connection errors that retrying will not fix as permanent: a
// rejected SASL authentication, an unsupported mechanism or an untrusted certificate.
func classify(err error) error {
	var ke kafka.Error
	if errors.As(err, &ke) {
		switch ke {
		case kafka.SASLAuthenticationFailed, kafka.UnsupportedSASLMechanism, kafka.IllegalSASLState:
			return fault.Permanent(err)
		}
	}
	var certErr *tls.CertificateVerificationError
	var unknownAuth x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var invalid x509.CertificateInvalidError
	if errors.As(err, &certErr) || errors.As(err, &unknownAuth) || errors.As(err, &hostErr) || errors.As(err, &invalid) {
		return fault.Permanent(err)
	}
	return err
}

// The methods below let the adapters take a connection through a small interface of
// their own (ingress/kafka.Conn, egress/kafka.Conn) instead of naming this internal type
// in their exported API.

// Addrs returns the bootstrap brokers.
func (c Config) Addrs() []string { return c.Brokers }

// NewDialer is Dialer(c).
func (c Config) NewDialer() (*kafka.Dialer, error) { return Dialer(c) }

// NewTransport is Transport(c).
func (c Config) NewTransport() (*kafka.Transport, error) { return Transport(c) }

// Ping is Ping(ctx, c).
func (c Config) Ping(ctx context.Context) error { return Ping(ctx, c) }
