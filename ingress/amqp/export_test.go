package amqp

// StopDeliveries injects a fault into the running session: it stops reading its
// deliveries while the consumer stays registered and the channel open, as a wedged
// channel would. The watchdog must report the consumer stalled and rebuild it.
func (s *Source) StopDeliveries() { s.wedge <- struct{}{} }
