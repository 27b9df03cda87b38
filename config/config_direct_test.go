package config

import (
	"strings"
	"testing"
)

func TestDirectSourceExchangeWithCatchAllKeyIsRefused(t *testing.T) {
	c := Default()
	c.Routes = []Route{{Name: "r",
		From: Endpoint{AMQP: &AMQPEndpoint{Queue: "q", Exchange: "x", ExchangeType: "direct"}},
		To:   Endpoint{AMQP: &AMQPEndpoint{Exchange: "t"}}}}
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "routes[0].from.amqp.exchange_type") {
		t.Fatalf("Validate() = %v, want an error naming routes[0].from.amqp.exchange_type", err)
	}
	c.Routes[0].From.AMQP.BindingKey = "invoice.eu"
	if err := c.Validate(); err != nil {
		t.Fatalf("a direct exchange with one exact key is fine: %v", err)
	}
}
