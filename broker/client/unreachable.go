package client

import (
	"errors"
	"net"

	"github.com/picomq/picomq/broker/errs"
)

// CodeBrokerUnreachable is BROKER_UNREACHABLE's code, 0.16.5.128: in the
// HTTP front end's block, from 0x80 up so that broker/dsapi's own refusals
// (0x00_10_05_01 and up) keep room to grow below it.
const CodeBrokerUnreachable errs.Code = 0x00_10_05_80

// BrokerUnreachable is a request that never reached the broker: its name
// did not resolve, or no connection could be opened to it (refused, no
// route to the host, dial timeout). Nothing was sent, so the request may be
// sent again as it is, whatever it was (an append included): it is
// retriable. The fields carry the endpoint and the operation; the cause (a
// *net.DNSError, a *net.OpError wrapping syscall.ECONNREFUSED...) is
// wrapped, for errors.Is and errors.As.
//
// A failure after the request was sent (the connection reset before the
// answer) is not this error: the broker may have acted on the request.
var BrokerUnreachable = errs.Static(CodeBrokerUnreachable, "BROKER_UNREACHABLE",
	"The broker could not be reached",
	"broker/client: the broker's name did not resolve or no connection could be opened to it; nothing was sent, so the request may be retried; the fields carry the endpoint",
	503, 69)

// Unreachable returns BROKER_UNREACHABLE wrapping err, with the endpoint
// and the operation, when err is a failure to reach the broker at endpoint
// at all (see BrokerUnreachable), and nil otherwise. Other HTTP clients of
// the broker (the operator's) use it to report the same error.
func Unreachable(endpoint, op string, err error) error {
	if !neverReached(err) {
		return nil
	}
	return BrokerUnreachable.Wrap(err, "endpoint", endpoint, "op", op)
}

// neverReached reports a failure before any byte of a request was sent: a
// name that does not resolve, a dial (to the broker or to its proxy) that
// failed. net/http's Transport and this package's report both as a
// *net.OpError of the dial (wrapping a *net.DNSError for names).
func neverReached(err error) bool {
	if err == nil {
		return false
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && (op.Op == "dial" || op.Op == "proxyconnect")
}
