package rebound

import (
	"testing"
	"time"
)

func TestEnqueueCarriesCompensationsInOrder(t *testing.T) {
	refund := NewCompensation("saga-undo", "refund-1").Payload([]byte("refund charge-1")).
		Attribute("tenant", "acme").WithPolicy(NewPolicy().MaxAttempts(4).InitialBackoff(2 * time.Second))
	release := NewCompensation("saga-stock", "release-1").Payload([]byte("release stock"))
	r := NewEnqueueRequest("saga-orders", "charge-1", WithCompensation(refund), Dependency("payments-gateway"),
		WithCompensation(release))
	got := r.GetCompensations()
	if len(got) != 2 {
		t.Fatalf("compensations: %v", got)
	}
	first, second := got[0], got[1]
	if first.GetService() != "saga-undo" || first.GetTransactionId() != "refund-1" ||
		string(first.GetPayload()) != "refund charge-1" || len(first.GetAttributes()) != 1 ||
		first.GetAttributes()["tenant"] != "acme" || first.GetPolicy().GetMaxAttempts() != 4 ||
		first.GetPolicy().GetInitialBackoff().AsDuration() != 2*time.Second {
		t.Fatalf("first: %v", first)
	}
	if second.GetService() != "saga-stock" || second.GetTransactionId() != "release-1" ||
		string(second.GetPayload()) != "release stock" || len(second.GetAttributes()) != 0 ||
		second.GetPolicy() != nil {
		t.Fatalf("second: %v", second)
	}
	if r.GetDependency() != "payments-gateway" {
		t.Fatalf("dependency %q", r.GetDependency())
	}
	// The setters return copies: the one built before is unchanged.
	if base := NewCompensation("s", "t"); base.Attribute("k", "v").Proto().GetAttributes()["k"] != "v" ||
		len(base.Proto().GetAttributes()) != 0 {
		t.Fatal("a setter changed the compensation it was called on")
	}
	if len(NewEnqueueRequest("s", "t").GetCompensations()) != 0 {
		t.Fatal("compensations without WithCompensation")
	}
}

func TestEnqueueCountsTheFailedCallAsAttempt1UnlessTold(t *testing.T) {
	// As the CLI and every SDK: the first delivery is then attempt 2.
	if got := NewEnqueueRequest("s", "t").GetAttempt(); got != 1 {
		t.Fatalf("default attempt %d, want 1", got)
	}
	if got := NewEnqueueRequest("s", "t", Attempt(0)).GetAttempt(); got != 0 {
		t.Fatalf("Attempt(0) gave %d", got)
	}
	if got := NewEnqueueRequest("s", "t", Attempt(3)).GetAttempt(); got != 3 {
		t.Fatalf("Attempt(3) gave %d", got)
	}
}
