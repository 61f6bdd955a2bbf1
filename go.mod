module github.com/retryhttp/retryhttp

go 1.26.0

require (
	github.com/hashicorp/go-cleanhttp v0.5.2 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	golang.org/x/time v0.16.0 // indirect
)
