package amqp

import (
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/internal/fault"
)

func TestOptionsDefaultsAndValidate(t *testing.T) {
	o := Options{}.withDefaults()
	if o.Channels != DefaultChannels || o.MaxInflight != DefaultMaxInflight || o.ConnectWait != DefaultConnectWait ||
		o.CloseWait != DefaultCloseWait || o.ProbeInterval != DefaultProbeInterval || o.Logger == nil || o.Clock == nil {
		t.Fatalf("defaults: %+v", o)
	}
	if err := o.Validate(); err != nil {
		t.Fatalf("defaults refused: %v", err)
	}
	for name, bad := range map[string]Options{
		"negative channels":     {Channels: -1},
		"negative max inflight": {MaxInflight: -5},
		"negative connect wait": {ConnectWait: -time.Second},
		"negative close wait":   {CloseWait: -time.Second},
		"negative probe":        {ProbeInterval: -time.Second},
	} {
		if err := bad.withDefaults().Validate(); !fault.IsPermanent(err) {
			t.Errorf("%s: Validate = %v, want a permanent error", name, err)
		}
	}
	if err := (Route{}).Validate(); !fault.IsPermanent(err) {
		t.Errorf("route without exchange: %v, want permanent", err)
	}
	if err := (Route{Exchange: "x"}).Validate(); err != nil {
		t.Errorf("route with exchange: %v", err)
	}
	if _, err := New(t.Context(), nil, nil, Options{}); !fault.IsPermanent(err) {
		t.Errorf("New without a connection manager: %v, want permanent", err)
	}
}
