package kafka

import (
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/internal/fault"
	"github.com/delaybridge/delay-bridge/internal/kafkaconn"
)

func TestOptionsDefaultsAndValidate(t *testing.T) {
	o := Options{}.withDefaults()
	if o.BatchSize != DefaultBatchSize || o.BatchBytes != DefaultBatchBytes || o.RequestBytes != DefaultRequestBytes ||
		o.AnswerTimeout != DefaultAnswerTimeout || o.ProbeInterval != DefaultProbeInterval || o.Logger == nil || o.Clock == nil {
		t.Fatalf("defaults: %+v", o)
	}
	if err := o.Validate(); err != nil {
		t.Fatalf("defaults refused: %v", err)
	}
	for name, bad := range map[string]Options{
		"negative batch size":     {BatchSize: -1},
		"negative batch bytes":    {BatchBytes: -1},
		"negative request bytes":  {RequestBytes: -1},
		"negative answer timeout": {AnswerTimeout: -time.Second},
		"negative probe interval": {ProbeInterval: -time.Second},
	} {
		if err := bad.withDefaults().Validate(); !fault.IsPermanent(err) {
			t.Errorf("%s: Validate = %v, want a permanent error", name, err)
		}
		if _, err := New(kafkaconn.Config{Brokers: []string{"127.0.0.1:1"}}, nil, bad); !fault.IsPermanent(err) {
			t.Errorf("%s: New = %v, want a permanent error", name, err)
		}
	}
}
