module github.com/delaybridge/delay-bridge/bench/amqp

go 1.26.8

require github.com/rabbitmq/amqp091-go v1.16.0
