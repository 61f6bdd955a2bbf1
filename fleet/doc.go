// Package fleet shares what the breakers and budgets of several processes
// learn, through a Store that they all reach: a key's circuit opening and
// closing, a key's hold, and how many processes there are, by which each
// process divides its retry budget. Requests read only local memory, so a
// store that is slow or down leaves each process as it would be alone.
//
// Create a Fleet with New, give it to the transports with
// retryhttp.WithFleet, and run it with Run for as long as they are used:
//
//	f := fleet.New(store, fleet.Config{})
//	go f.Run(ctx)
//	client := &http.Client{Transport: retryhttp.New(nil, retryhttp.WithFleet(f))}
//
// The module github.com/retryhttp/retryhttp/redisstate implements Store on
// Redis.
package fleet
