package kafkaconn

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/segmentio/kafka-go/sasl"

	"github.com/delaybridge/delay-bridge/internal/fault"
)

// scramMechanism wraps kafka-go's SCRAM mechanism (RFC 5802/7677, github.com/xdg-go/scram
// underneath) to mark the failures of an exchange permanent where they arise (a server
// that rejects the login, or proves nothing, is not fixed by retrying) and to refuse a
// server nonce that does not add to the client's (RFC 5802 §5.1: the server appends its
// own nonce), which the library lets through.
type scramMechanism struct{ sasl.Mechanism }

func (m scramMechanism) Start(ctx context.Context) (sasl.StateMachine, []byte, error) {
	sm, first, err := m.Mechanism.Start(ctx)
	if err != nil {
		return nil, nil, fault.Permanent(fmt.Errorf("sasl scram: %w", err))
	}
	_, nonce, _ := strings.Cut(string(first), ",r=")
	return &scramSession{StateMachine: sm, clientNonce: nonce}, first, nil
}

type scramSession struct {
	sasl.StateMachine
	clientNonce string
	step        int
}

func (s *scramSession) Next(ctx context.Context, challenge []byte) (bool, []byte, error) {
	s.step++
	if s.step == 1 {
		if r, ok := strings.CutPrefix(string(challenge), "r="); ok {
			if nonce, _, _ := strings.Cut(r, ","); nonce == s.clientNonce {
				return false, nil, fault.Permanent(errors.New("sasl scram: server nonce does not extend the client nonce"))
			}
		}
	}
	done, resp, err := s.StateMachine.Next(ctx, challenge)
	if err != nil {
		return done, resp, fault.Permanent(fmt.Errorf("sasl scram: %w", err))
	}
	return done, resp, nil
}
