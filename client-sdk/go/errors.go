package rebound

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Error is what every failed call returns: the gRPC code and the server's message, which
// names the field and the limit for bad input.
type Error struct {
	Code    codes.Code
	Message string
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Message) }

// Retryable is true for UNAVAILABLE, DEADLINE_EXCEEDED and RESOURCE_EXHAUSTED: the outcome is
// unknown or the node is busy, and re-sending is safe (an enqueue is idempotent by service and
// transaction id, so a repeat never doubles it).
func (e *Error) Retryable() bool { return retryableCode(e.Code) }

// GRPCStatus lets status.FromError and status.Code see the code.
func (e *Error) GRPCStatus() *status.Status { return status.New(e.Code, e.Message) }

func retryableCode(c codes.Code) bool {
	return c == codes.Unavailable || c == codes.DeadlineExceeded || c == codes.ResourceExhausted
}

// CodeOf returns the gRPC code of err (codes.OK for nil, codes.Unknown for a non-gRPC error).
func CodeOf(err error) codes.Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return status.Code(err)
}

// wrap turns a gRPC or context error into an *Error.
func wrap(err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return &Error{Code: codes.DeadlineExceeded, Message: err.Error()}
	}
	if errors.Is(err, context.Canceled) {
		return &Error{Code: codes.Canceled, Message: err.Error()}
	}
	s, _ := status.FromError(err)
	return &Error{Code: s.Code(), Message: s.Message()}
}

// codeOf is the codes.Code of a numeric google.rpc.Code (Unknown when out of range).
func codeOf(c int32) codes.Code {
	if c < 0 || c > 16 {
		return codes.Unknown
	}
	return codes.Code(c)
}
