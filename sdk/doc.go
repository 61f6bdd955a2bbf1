// Package sdk measures retryhttp under real SDK clients.
//
// Its tests run the Stripe, AWS (S3, DynamoDB) and OpenAI Go SDKs against a
// scripted loopback server (httptest, 127.0.0.1 only) through a
// retryhttp.Transport, and count the attempts that reach the server for
// each SDK call when both layers retry. The package has no exported API;
// it is a separate module so that the SDKs stay out of the library's
// go.mod.
//
//	go test -race ./...                       # the table, asserted
//	go test -v -run . ./... -args -json out.json # and logged, and written as JSON
package sdk
