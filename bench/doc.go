// Package bench measures retryhttp beside its peers, go-retryablehttp and
// failsafe-go, and beside the bare transport: the success-path cost
// (bench_test.go), a real-time thundering herd against a flaky loopback
// server (RunHerd) and its recovery from a blip and an outage
// (RunRecovery), a batch against a throttling server (RunThrottled), and
// the metastable trigger: open-loop load against a server of fixed
// capacity that serves abandoned requests, its capacity cut for a while
// (RunMetastable). It is a separate module so that the peers never become
// dependencies of retryhttp itself.
//
// Every network call goes to a server this package starts on 127.0.0.1.
package bench
