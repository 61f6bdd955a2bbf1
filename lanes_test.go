package retryhttp

import (
	"net/url"
	"testing"

	"github.com/retryhttp/retryhttp/internal/perkey"
	"github.com/stretchr/testify/require"
)

// What the tests of this package call the kinds of outcome a lane is told
// of, and the key of a URL.
type outcome = perkey.Kind

const (
	outcomeNone    = perkey.None
	outcomeSuccess = perkey.Success
	outcomeFailure = perkey.Failure
)

func keyOf(u *url.URL) hostKey { return perkey.KeyOf(u) }

// mustParse parses a URL the test wrote.
func mustParse(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err)
	return u
}
