// Package kafkaconn builds the connection settings shared by the Kafka source
// (ingress/kafka, a kafka-go Reader that needs a *kafka.Dialer) and the Kafka sink
// (egress/kafka, a kafka-go Writer that needs a *kafka.Transport) from config.KafkaConfig:
// TLS (CA, client certificate and key files) and SASL (PLAIN, SCRAM-SHA-256,
// SCRAM-SHA-512).
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

	"github.com/delaybridge/delay-bridge/config"
)

// DialTimeout bounds connection establishment including the TLS handshake and SASL.
const DialTimeout = 10 * time.Second

// SASL mechanism names accepted in kafka.sasl.mechanism (case-insensitive).
const (
	MechanismPlain       = "PLAIN"
	MechanismScramSHA256 = "SCRAM-SHA-256"
	MechanismScramSHA512 = "SCRAM-SHA-512"
)

// TLSConfig returns the client TLS configuration for c, or nil when c.Enabled is false.
// CAFile replaces the system roots when set; CertFile and KeyFile (both or neither) give
// the client certificate for mutual TLS.
func TLSConfig(c config.TLSConfig) (*tls.Config, error) {
	if !c.Enabled {
		return nil, nil
	}
	return c.ClientTLS()
}

// Mechanism returns the SASL mechanism for c, or nil when c.Mechanism is empty.
func Mechanism(c config.SASLConfig) (sasl.Mechanism, error) {
	switch strings.ToUpper(c.Mechanism) {
	case "":
		return nil, nil
	case MechanismPlain:
		return plain.Mechanism{Username: c.Username, Password: c.Password}, nil
	case MechanismScramSHA256:
		return newScram(MechanismScramSHA256, c.Username, c.Password)
	case MechanismScramSHA512:
		return newScram(MechanismScramSHA512, c.Username, c.Password)
	}
	return nil, fmt.Errorf("sasl.mechanism: want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, got %q", c.Mechanism)
}

// Dialer returns a kafka-go Dialer (for Readers and admin connections) with the TLS and
// SASL settings of c.
func Dialer(c config.KafkaConfig) (*kafka.Dialer, error) {
	tc, mech, err := settings(c)
	if err != nil {
		return nil, err
	}
	return &kafka.Dialer{
		ClientID:      "delay-bridge",
		Timeout:       DialTimeout,
		DualStack:     true,
		KeepAlive:     30 * time.Second,
		TLS:           tc,
		SASLMechanism: mech,
	}, nil
}

// Transport returns a kafka-go Transport (for Writers) with the TLS and SASL settings of
// c. The caller owns it and releases its connections with CloseIdleConnections.
func Transport(c config.KafkaConfig) (*kafka.Transport, error) {
	tc, mech, err := settings(c)
	if err != nil {
		return nil, err
	}
	d := &net.Dialer{Timeout: DialTimeout, KeepAlive: 30 * time.Second}
	return &kafka.Transport{
		Dial:        d.DialContext,
		DialTimeout: DialTimeout,
		ClientID:    "delay-bridge",
		TLS:         tc,
		SASL:        mech,
	}, nil
}

func settings(c config.KafkaConfig) (*tls.Config, sasl.Mechanism, error) {
	if len(c.Brokers) == 0 {
		return nil, nil, errors.New("kafka.brokers: at least one broker is required")
	}
	tc, err := TLSConfig(c.TLS)
	if err != nil {
		return nil, nil, fmt.Errorf("kafka.%w", err)
	}
	mech, err := Mechanism(c.SASL)
	if err != nil {
		return nil, nil, fmt.Errorf("kafka.%w", err)
	}
	return tc, mech, nil
}

// Ping connects to the brokers of c in turn (TLS handshake and SASL included) and reads
// the cluster metadata. It returns nil as soon as one broker answers. Errors that
// retrying will not fix (authentication, certificates) satisfy IsPermanent.
func Ping(ctx context.Context, c config.KafkaConfig) error {
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
		errs = append(errs, fmt.Errorf("kafka broker %s: %w", b, err))
		if ctx.Err() != nil {
			break
		}
	}
	return errors.Join(errs...)
}

// IsPermanent reports whether err is a connection error that retrying will not fix: a
// rejected SASL authentication, an unsupported mechanism or an untrusted certificate.
func IsPermanent(err error) bool {
	if err == nil {
		return false
	}
	var ke kafka.Error
	if errors.As(err, &ke) {
		switch ke {
		case kafka.SASLAuthenticationFailed, kafka.UnsupportedSASLMechanism, kafka.IllegalSASLState:
			return true
		}
	}
	var scramErr *ScramError
	var certErr *tls.CertificateVerificationError
	var unknownAuth x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var invalid x509.CertificateInvalidError
	return errors.As(err, &scramErr) || errors.As(err, &certErr) || errors.As(err, &unknownAuth) ||
		errors.As(err, &hostErr) || errors.As(err, &invalid)
}
