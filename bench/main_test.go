package bench

import (
	"flag"
	"testing"

	"go.uber.org/goleak"
)

// table asks the tests that have a longer form for it, and for its table:
// go test -run TestX -v -args -table.
var table = flag.Bool("table", false, "TestNginxThrottled: also run retryhttp without budget and breaker and both peers, and log the five-client table; TestMetastable: every client, a 3 s warm-up and a 12 s tail")

// ulule/limiter's memory store cleans up in a goroutine of its own, which
// it stops only when the store is collected (a finalizer); it offers no
// Close, so whether the goroutine is still there at the end depends on
// when the collector last ran.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/ulule/limiter/v3/drivers/store/memory.(*cleaner).Run"))
}
