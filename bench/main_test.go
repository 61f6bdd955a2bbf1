package bench

import (
	"flag"
	"testing"

	"go.uber.org/goleak"
)

// table asks the tests that have a longer form for it, and for its table:
// go test -run TestX -v -args -table.
var table = flag.Bool("table", false, "TestNginxThrottled: also run retryhttp without budget and breaker and both peers, and log the five-client table; TestMetastable: every client, a 3 s warm-up and a 12 s tail")

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
