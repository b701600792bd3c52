package rebound

import (
	"strings"
	"testing"
	"time"

	pb "github.com/rebound-dev/rebound/client-sdk/go/reboundv1"
)

func TestHoldIsARetryAckCarryingTheHold(t *testing.T) {
	a := Hold(30*time.Second, "Retry-After: 30").ack("d")
	if a.GetDeliveryId() != "d" || a.GetOutcome() != pb.AckOutcome_ACK_OUTCOME_RETRY || a.GetSnooze() ||
		a.GetRetryAfter() != nil || a.GetError() != "Retry-After: 30" {
		t.Fatalf("ack: %v", a)
	}
	if h := a.GetHold(); h.GetDuration().AsDuration() != 30*time.Second || h.GetReason() != "Retry-After: 30" {
		t.Fatalf("hold: %v", h)
	}
	// The reason is cut to the server's 1 KiB, at a character boundary; the error to 8 KiB.
	long := strings.Repeat("é", 1000)
	a = Hold(time.Second, long).ack("d")
	if r := a.GetHold().GetReason(); len(r) != 1024 || r != long[:1024] {
		t.Fatalf("reason of %d bytes", len(r))
	}
	if a.GetError() != long {
		t.Fatalf("error of %d bytes", len(a.GetError()))
	}
	// No other outcome carries a hold.
	for _, o := range []Outcome{Success(), Retry("x"), RetryAfter(time.Second, "x"), Snooze(time.Second, "x"), Fail("x")} {
		if o.ack("d").GetHold() != nil {
			t.Fatalf("%+v carries a hold", o)
		}
	}
}
