package header

import (
	"math"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// qtNow is the instant the quota tests measure from; qtMax the clamp.
var qtNow = time.Date(2026, time.March, 4, 5, 6, 7, 0, time.UTC)

const qtMax = 30 * time.Second

// qtEpoch is the Unix time d after qtNow, as X-RateLimit-Reset sends it.
func qtEpoch(d time.Duration) string { return strconv.FormatInt(qtNow.Add(d).Unix(), 10) }

// qtQ is the quota a row expects; asked is the reset the server asked for
// (-1 unknown), which ReadQuotas must clamp to qtMax.
func qtQ(limit int64, window time.Duration, remaining int64, asked time.Duration) Policy {
	q := Policy{Limit: limit, Window: window, Remaining: remaining, Reset: asked, Asked: asked}
	if asked > qtMax {
		q.Reset, q.Clamped = qtMax, true
	}
	return q
}

func (q Policy) qtIn(partition string) Policy { q.Partition = partition; return q }
func (q Policy) qtBucket() Policy             { q.Refill = true; return q }
func (q Policy) qtInstant() Policy            { q.Instant = true; return q }

// qtHeader builds a header through Header.Add, which canonicalises names.
func qtHeader(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

const qtS = time.Second

var quotaRows = []struct {
	name string
	h    http.Header
	want []Policy
}{
	// IETF, drafts -08 to -12:
	// https://datatracker.ietf.org/doc/draft-ietf-httpapi-ratelimit-headers/
	{"ietf/one_policy", qtHeader("RateLimit-Policy", `"burst";q=100;w=60`, "RateLimit", `"burst";r=50;t=30`),
		[]Policy{qtQ(100, 60*qtS, 50, 30*qtS)}},
	{"ietf/two_policies", qtHeader("RateLimit-Policy", `"burst";q=100;w=60, "daily";q=1000;w=86400`,
		"RateLimit", `"daily";r=900;t=3600, "burst";r=50;t=30`),
		[]Policy{qtQ(1000, 86400*qtS, 900, 3600*qtS), qtQ(100, 60*qtS, 50, 30*qtS)}},
	{"ietf/policy_without_ratelimit", qtHeader("RateLimit-Policy", `"permin";q=50;w=60,"perhr";q=1000;w=3600`),
		[]Policy{qtQ(50, 60*qtS, -1, -1), qtQ(1000, 3600*qtS, -1, -1)}},
	{"ietf/ratelimit_without_policy", qtHeader("RateLimit", `"default";r=0;t=50`), []Policy{qtQ(-1, 0, 0, 50*qtS)}},
	{"ietf/no_t", qtHeader("RateLimit", `"default";r=999`), []Policy{qtQ(-1, 0, 999, -1)}},
	{"ietf/t_zero_is_now", qtHeader("RateLimit", `"default";r=0;t=0`), []Policy{qtQ(-1, 0, 0, 0)}},
	{"ietf/pk", qtHeader("RateLimit", `"default";r=999;pk=:dHJpYWwxMjEzMjM=:`),
		[]Policy{qtQ(-1, 0, 999, -1).qtIn("dHJpYWwxMjEzMjM=")}},
	{"ietf/pk_from_policy", qtHeader("RateLimit-Policy", `"peruser";q=100;w=60;pk=:cHsdsRa894==:`, "RateLimit", `"peruser";r=7;t=9`),
		[]Policy{qtQ(100, 60*qtS, 7, 9*qtS).qtIn("cHsdsRa894==")}},
	{"ietf/pk_unpadded", qtHeader("RateLimit", `"a";r=1;pk=:YWJj:, "b";r=2;pk=:YWI:`),
		[]Policy{qtQ(-1, 0, 1, -1).qtIn("YWJj"), qtQ(-1, 0, 2, -1).qtIn("YWI")}},
	{"ietf/content_bytes_ignored", qtHeader(
		"RateLimit-Policy", `"bytes";q=65535;qu="content-bytes";w=10, "req";q=10;w=1;qu="requests"`,
		"RateLimit", `"bytes";r=300;t=5, "req";r=5;t=1`),
		[]Policy{qtQ(10, 1*qtS, 5, 1*qtS)}},
	{"ietf/concurrent_requests_ignored", qtHeader("RateLimit-Policy", `"conc";q=4;qu="concurrent-requests"`), nil},
	{"ietf/unknown_parameters_ignored", qtHeader(
		"RateLimit-Policy", `"burst";q=100;w=60;acme-burst=7;comment="x";*x=?1;z=@1659578233;d=%"caf%c3%a9";e=-1.5`,
		"RateLimit", `"burst";r=50;t=30;foo=:AA==:;q=12`),
		[]Policy{qtQ(100, 60*qtS, 50, 30*qtS)}},
	{"ietf/repeated_parameter_last_wins", qtHeader("RateLimit", `"a";r=-1;r=4;t="x";t=2`), []Policy{qtQ(-1, 0, 4, 2*qtS)}},
	{"ietf/split_over_lines", qtHeader("RateLimit-Policy", `"a";q=10;w=1`, "RateLimit-Policy", "", "RateLimit-Policy", `"b";q=20;w=2`),
		[]Policy{qtQ(10, 1*qtS, -1, -1), qtQ(20, 2*qtS, -1, -1)}},
	{"ietf/token_name", qtHeader("RateLimit-Policy", `default;q=100;w=10`, "RateLimit", `default;r=50;t=5`),
		[]Policy{qtQ(100, 10*qtS, 50, 5*qtS)}},
	{"ietf/name_with_escape", qtHeader("RateLimit-Policy", `"a\"b";q=1;w=1`, "RateLimit", `"a\"b";r=0;t=3`),
		[]Policy{qtQ(1, 1*qtS, 0, 3*qtS)}},
	{"ietf/beyond_the_clamp", qtHeader("RateLimit", `"day";r=100;t=36000`), []Policy{qtQ(-1, 0, 100, 36000*qtS)}},
	{"ietf/largest_integer_saturates", qtHeader("RateLimit", `"x";r=999999999999999;t=999999999999999`),
		[]Policy{qtQ(-1, 0, 999999999999999, math.MaxInt64)}},
	{"ietf/more_than_maxQuotas", qtHeader("RateLimit", `"a";r=1, "b";r=2, "c";r=3, "d";r=4, "e";r=5`),
		[]Policy{qtQ(-1, 0, 1, -1), qtQ(-1, 0, 2, -1), qtQ(-1, 0, 3, -1), qtQ(-1, 0, 4, -1)}},
	// Malformed: the whole field is ignored, the other field still read.
	{"ietf/malformed_member_ignores_field", qtHeader("RateLimit-Policy", `"burst";q=100;w=60`, "RateLimit", `"burst";r=50;t=30, "daily";r=-1;t=5`),
		[]Policy{qtQ(100, 60*qtS, -1, -1)}},
	{"ietf/trailing_comma", qtHeader("RateLimit", `"burst";r=50;t=30,`), nil},
	{"ietf/policy_fails_after_a_member", qtHeader("RateLimit-Policy", `"burst";q=100;w=60, "daily";q=1000;w=86400 x`,
		"RateLimit", `"burst";r=50;t=30`), []Policy{qtQ(-1, 0, 50, 30*qtS)}},
	{"ietf/missing_r", qtHeader("RateLimit", `"burst";t=30`), nil},
	{"ietf/missing_q", qtHeader("RateLimit-Policy", `"burst";w=60`, "RateLimit", `"burst";r=5`), []Policy{qtQ(-1, 0, 5, -1)}},
	{"ietf/decimal_r", qtHeader("RateLimit", `"burst";r=5.0;t=30`), nil},
	{"ietf/string_t", qtHeader("RateLimit", `"burst";r=5;t="30"`), nil},
	{"ietf/pk_not_bytes", qtHeader("RateLimit", `"burst";r=5;pk="abc"`), nil},
	{"ietf/pk_bad_base64", qtHeader("RateLimit", `"burst";r=5;pk=:a=b=:`), nil},
	{"ietf/qu_not_string", qtHeader("RateLimit-Policy", `"burst";q=5;qu=requests`), nil},
	{"ietf/integer_member_in_ratelimit", qtHeader("RateLimit", `5;r=5`), nil},
	{"ietf/inner_list_member", qtHeader("RateLimit-Policy", `("a" "b");q=5`), nil},
	{"ietf/sixteen_digits", qtHeader("RateLimit", `"burst";r=1234567890123456`), nil},
	{"ietf/bad_string_escape", qtHeader("RateLimit", `"a\b";r=1`), nil},
	{"ietf/tab_in_string", qtHeader("RateLimit", "\"a\tb\";r=1"), nil},
	{"ietf/non_ascii_in_string", qtHeader("RateLimit", `"café";r=1`), nil},
	{"ietf/bad_display_string", qtHeader("RateLimit", `"a";r=1;d=%"%c3"`), nil},
	{"ietf/inner_list_as_parameter", qtHeader("RateLimit", `"a";r=1;y=(1 2)`), nil},
	{"ietf/uppercase_key", qtHeader("RateLimit", `"a";R=1`), nil},
	// HTTP/2 lowercases names; a map built by hand keeps them.
	{"ietf/lowercase_names", http.Header{"ratelimit-policy": {`"burst";q=100;w=60`}, "ratelimit": {`"burst";r=50;t=30`}},
		[]Policy{qtQ(100, 60*qtS, 50, 30*qtS)}},

	// Draft -07's Dictionary and Integer policies:
	// https://datatracker.ietf.org/doc/draft-ietf-httpapi-ratelimit-headers/07/
	{"draft07/dictionary", qtHeader("RateLimit", "limit=100, remaining=50, reset=5", "RateLimit-Policy", "100;w=60"),
		[]Policy{qtQ(100, 60*qtS, 50, 5*qtS)}},
	{"draft07/several_policies", qtHeader("RateLimit", "limit=100, remaining=50, reset=5", "RateLimit-Policy", "10;w=1;burst=1000, 100;w=60"),
		[]Policy{qtQ(100, 60*qtS, 50, 5*qtS), qtQ(10, 1*qtS, -1, -1)}},
	{"draft07/no_remaining", qtHeader("RateLimit", "limit=10, reset=7"), []Policy{qtQ(10, 0, -1, 7*qtS)}},
	{"draft07/parameters_ignored", qtHeader("RateLimit", "limit=10;a=1, reset=7;b"), []Policy{qtQ(10, 0, -1, 7*qtS)}},
	{"draft07/no_reset", qtHeader("RateLimit", "limit=10, remaining=5"), nil},
	{"draft07/negative", qtHeader("RateLimit", "limit=10, remaining=-5, reset=1"), nil},
	{"draft07/policy_without_w", qtHeader("RateLimit-Policy", "100, 10;w=1"), nil},

	// Drafts -00 to -06: RateLimit-Limit, -Remaining, -Reset (delta seconds).
	// https://datatracker.ietf.org/doc/draft-ietf-httpapi-ratelimit-headers/06/
	{"draft06/separate_fields", qtHeader("RateLimit-Limit", "100", "RateLimit-Remaining", "7", "RateLimit-Reset", "20"),
		[]Policy{qtQ(100, 0, 7, 20*qtS)}},
	{"draft06/with_policy", qtHeader("RateLimit-Limit", "100", "RateLimit-Reset", "2", "RateLimit-Policy", "100;w=60"),
		[]Policy{qtQ(100, 60*qtS, -1, 2*qtS)}},
	{"draft00/limit_lists_policies", qtHeader("RateLimit-Limit", "100, 100;window=60, 1000;window=3600", "RateLimit-Remaining", "9"),
		[]Policy{qtQ(100, 60*qtS, 9, -1)}},
	{"draft06/reset_beyond_the_clamp", qtHeader("RateLimit-Reset", "99999999999999999999"), []Policy{qtQ(-1, 0, -1, math.MaxInt64)}},
	{"draft06/signed_reset", qtHeader("RateLimit-Remaining", "1", "RateLimit-Reset", "+5"), []Policy{qtQ(-1, 0, 1, -1)}},
	// GitLab: a Unix time, and a limit per minute:
	// https://docs.gitlab.com/ee/user/admin_area/settings/user_and_ip_rate_limits.html
	{"gitlab/unix_reset", qtHeader("RateLimit-Limit", "600", "RateLimit-Observed", "6", "RateLimit-Remaining", "594",
		"RateLimit-Reset", qtEpoch(20*qtS), "RateLimit-ResetTime", qtNow.Add(20*qtS).Format(http.TimeFormat)),
		[]Policy{qtQ(600, time.Minute, 594, 20*qtS).qtInstant()}},
	{"gitlab/past_reset", qtHeader("RateLimit-Limit", "600", "RateLimit-Observed", "600", "RateLimit-Remaining", "0",
		"RateLimit-Reset", qtEpoch(-90*qtS)),
		[]Policy{qtQ(600, time.Minute, 0, 0).qtInstant()}},

	// GitHub: https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api
	{"github/core", qtHeader("X-RateLimit-Limit", "5000", "X-RateLimit-Remaining", "4999", "X-RateLimit-Used", "1",
		"X-RateLimit-Reset", qtEpoch(3000*qtS), "X-RateLimit-Resource", "core", "X-GitHub-Request-Id", "CAFE:1"),
		[]Policy{qtQ(5000, 0, 4999, 3000*qtS).qtIn("core").qtInstant()}},
	{"github/used_without_remaining", qtHeader("X-RateLimit-Limit", "60", "X-RateLimit-Used", "61", "X-RateLimit-Reset", qtEpoch(10*qtS)),
		[]Policy{qtQ(60, 0, 0, 10*qtS).qtInstant()}},
	{"github/search_past_reset", qtHeader("X-RateLimit-Limit", "30", "X-RateLimit-Remaining", "0",
		"X-RateLimit-Reset", qtEpoch(-5*qtS), "X-RateLimit-Resource", "search"),
		[]Policy{qtQ(30, 0, 0, 0).qtIn("search").qtInstant()}},
	// go-chi/httprate v0.16.1 (limiter.go) sends a Unix time and no marker.
	{"httprate/unix_reset", qtHeader("X-RateLimit-Limit", "100", "X-RateLimit-Remaining", "99", "X-RateLimit-Reset", qtEpoch(60*qtS)),
		[]Policy{qtQ(100, 0, 99, 60*qtS).qtInstant()}},
	// Unipile sends a delta, unmarked (https://developer.unipile.com/v2.0/reference/rate-limit):
	// no Unix time is that small, so it is delta seconds.
	{"x/unmarked_delta", qtHeader("X-RateLimit-Limit", "50", "X-RateLimit-Remaining", "12", "X-RateLimit-Reset", "24"),
		[]Policy{qtQ(50, 0, 12, 24*qtS)}},
	{"x/unmarked_delta_zero", qtHeader("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "0"), []Policy{qtQ(-1, 0, 0, 0)}},
	{"x/largest_delta", qtHeader("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", strconv.FormatInt(qtNow.Unix()/2-1, 10)),
		[]Policy{qtQ(-1, 0, 0, time.Duration(qtNow.Unix()/2-1)*qtS)}},
	{"x/oldest_unix_time_is_past", qtHeader("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", strconv.FormatInt(qtNow.Unix()/2, 10)),
		[]Policy{qtQ(-1, 0, 0, 0).qtInstant()}},
	// The real middlewares' header sets, as their sources write them.
	// throttled/throttled v2.15.0 (http.go), GCRA with a burst of 10: the
	// limit is the burst plus one, the reset seconds until the bucket is
	// full, rounded up.
	{"throttled/gcra", qtHeader("X-RateLimit-Limit", "11", "X-RateLimit-Remaining", "9", "X-RateLimit-Reset", "1"),
		[]Policy{qtQ(11, 0, 9, 1*qtS)}},
	{"throttled/gcra_refused", qtHeader("X-RateLimit-Limit", "11", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1",
		"Retry-After", "1"),
		[]Policy{qtQ(11, 0, 0, 1*qtS)}},
	// sethvargo/go-limiter v0.7.1 (httplimit): the reset a time.RFC1123
	// date in UTC.
	{"golimiter/utc_date", qtHeader("X-RateLimit-Limit", "100", "X-RateLimit-Remaining", "42",
		"X-RateLimit-Reset", qtNow.Add(2*qtS).Format(time.RFC1123)),
		[]Policy{qtQ(100, 0, 42, 2*qtS).qtInstant()}},
	{"x/numeric_zone_date", qtHeader("X-RateLimit-Remaining", "0",
		"X-RateLimit-Reset", qtNow.Add(3*qtS).In(time.FixedZone("", -5*3600)).Format(time.RFC1123Z)),
		[]Policy{qtQ(-1, 0, 0, 3*qtS).qtInstant()}},
	{"x/unknown_zone_date_ignored", qtHeader("X-RateLimit-Remaining", "0",
		"X-RateLimit-Reset", qtNow.Add(3*qtS).Format("Mon, 02 Jan 2006 15:04:05")+" EST"),
		[]Policy{qtQ(-1, 0, 0, -1)}},
	// ulule/limiter v3.11.2 (drivers/middleware/stdlib): a fixed window,
	// the reset a Unix time.
	{"ulule/fixed_window", qtHeader("X-RateLimit-Limit", "100", "X-RateLimit-Remaining", "57", "X-RateLimit-Reset", qtEpoch(1*qtS)),
		[]Policy{qtQ(100, 0, 57, 1*qtS).qtInstant()}},
	// didip/tollbooth v7.0.2 (tollbooth.go), a token bucket of 100 a
	// second with a burst of 10: RateLimit-Limit is the rate,
	// RateLimit-Remaining what the burst has left, RateLimit-Reset always
	// 1; X-Rate-Limit-Limit the rate with two decimals, its window in
	// X-Rate-Limit-Duration.
	{"tollbooth/bucket", qtHeader("X-Rate-Limit-Limit", "100.00", "X-Rate-Limit-Duration", "1",
		"X-Rate-Limit-Request-Remote-Addr", "127.0.0.1:40000",
		"RateLimit-Limit", "100", "RateLimit-Reset", "1", "RateLimit-Remaining", "9"),
		[]Policy{qtQ(100, 0, 9, 1*qtS), qtQ(100, 1*qtS, -1, -1)}},
	{"x/fractional_limit_refused", qtHeader("X-Rate-Limit-Limit", "2.5", "X-Rate-Limit-Remaining", "1.0"),
		[]Policy{qtQ(-1, 0, 1, -1)}},
	{"x/duration_without_limit_ignored", qtHeader("X-Rate-Limit-Duration", "1", "X-Rate-Limit-Remaining", "3"),
		[]Policy{qtQ(-1, 0, 3, -1)}},
	// The first drafts under an X- prefix: the limit lists policies, the reset
	// is a delta (https://developer.whoop.com/docs/developing/rate-limiting).
	{"x/draft_policies_mean_delta", qtHeader("X-RateLimit-Limit", "100, 100;window=60, 10000;window=86400",
		"X-RateLimit-Remaining", "98", "X-RateLimit-Reset", "3"),
		[]Policy{qtQ(100, 60*qtS, 98, 3*qtS)}},
	// Discord: https://discord.com/developers/docs/topics/rate-limits
	{"discord/reset_after", qtHeader("X-RateLimit-Limit", "5", "X-RateLimit-Remaining", "1", "X-RateLimit-Reset", "1470173023.123",
		"X-RateLimit-Reset-After", "1.234", "X-RateLimit-Bucket", "abcd1234"),
		[]Policy{qtQ(5, 0, 1, 1234*time.Millisecond).qtIn("abcd1234")}},
	{"discord/fractional_unix_reset", qtHeader("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", qtEpoch(2*qtS)+".5"),
		[]Policy{qtQ(-1, 0, 0, 2500*time.Millisecond).qtInstant()}},
	// Azure DevOps counts TSTUs: https://learn.microsoft.com/azure/devops/integrate/concepts/rate-limits
	{"azuredevops/tstu_ignored", qtHeader("X-RateLimit-Resource", "Core", "X-RateLimit-Delay", "0.5", "X-RateLimit-Limit", "200",
		"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", qtEpoch(10*qtS)), nil},
	// Twitter/X: https://docs.x.com/fundamentals/rate-limits
	{"twitter/unix_reset", qtHeader("x-rate-limit-limit", "900", "x-rate-limit-remaining", "847", "x-rate-limit-reset", qtEpoch(600*qtS)),
		[]Policy{qtQ(900, 0, 847, 600*qtS).qtInstant()}},
	{"x/huge_unix_reset_saturates", qtHeader("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "99999999999999999999"),
		[]Policy{qtQ(-1, 0, 0, math.MaxInt64).qtInstant()}},
	{"x/huge_counts_saturate", qtHeader("X-RateLimit-Limit", "99999999999999999999", "X-RateLimit-Remaining", "9223372036854775808"),
		[]Policy{qtQ(math.MaxInt64, 0, math.MaxInt64, -1)}},
	{"x/negative_and_malformed_ignored", qtHeader("X-RateLimit-Limit", "abc", "X-RateLimit-Remaining", "-1",
		"X-RateLimit-Reset", "-5", "X-RateLimit-Used", "1.5"), nil},
	{"x/repeated_reads_first", qtHeader("X-RateLimit-Remaining", "5", "X-RateLimit-Remaining", "0"), []Policy{qtQ(-1, 0, 5, -1)}},
	{"x/comma_joined_is_malformed", qtHeader("X-RateLimit-Remaining", "5, 0", "X-RateLimit-Limit", "10"), []Policy{qtQ(10, 0, -1, -1)}},
	{"x/lowercase_names", http.Header{"x-ratelimit-remaining": {" 5 "}, "x-ratelimit-reset": {qtEpoch(7 * qtS)}},
		[]Policy{qtQ(-1, 0, 5, 7*qtS).qtInstant()}},
	{"x/two_spellings_canonical_wins", http.Header{"X-Ratelimit-Remaining": {"5"}, "x-ratelimit-remaining": {"7"}},
		[]Policy{qtQ(-1, 0, 5, -1)}},

	// OpenAI: https://platform.openai.com/docs/guides/rate-limits
	{"openai/requests", qtHeader("x-ratelimit-limit-requests", "60", "x-ratelimit-remaining-requests", "59",
		"x-ratelimit-reset-requests", "1s", "x-ratelimit-limit-tokens", "150000",
		"x-ratelimit-remaining-tokens", "149984", "x-ratelimit-reset-tokens", "6m0s"),
		[]Policy{qtQ(60, 0, 59, 1*qtS).qtBucket()}},
	{"openai/minutes_and_fractions", qtHeader("x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "2m59.56s"),
		[]Policy{qtQ(-1, 0, 0, 179560*time.Millisecond).qtBucket()}},
	{"openai/milliseconds", qtHeader("x-ratelimit-remaining-requests", "4999", "x-ratelimit-reset-requests", "12ms"),
		[]Policy{qtQ(-1, 0, 4999, 12*time.Millisecond).qtBucket()}},
	{"openai/huge_duration_saturates", qtHeader("x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "99999999999999h1s"),
		[]Policy{qtQ(-1, 0, 0, math.MaxInt64).qtBucket()}},
	{"openai/bad_durations_ignored", qtHeader("x-ratelimit-remaining-requests", "3", "x-ratelimit-reset-requests", "5"),
		[]Policy{qtQ(-1, 0, 3, -1).qtBucket()}},
	{"openai/negative_duration_ignored", qtHeader("x-ratelimit-limit-requests", "3", "x-ratelimit-reset-requests", "-1s"),
		[]Policy{qtQ(3, 0, -1, -1).qtBucket()}},
	{"openai/tokens_only_ignored", qtHeader("x-ratelimit-limit-tokens", "150000", "x-ratelimit-remaining-tokens", "0"), nil},
	// Azure OpenAI's -1, a limit it does not track:
	// https://learn.microsoft.com/en-us/answers/questions/5625878/azure-openai-responses-api-x-ratelimit-headers-val
	{"azureopenai/minus_one_unknown", qtHeader("x-ratelimit-limit-requests", "-1", "x-ratelimit-remaining-requests", "-1",
		"x-ratelimit-reset-requests", "0"),
		[]Policy{qtQ(-1, 0, -1, 0).qtBucket()}},

	// Anthropic: https://docs.anthropic.com/en/api/rate-limits
	{"anthropic/requests", qtHeader("anthropic-ratelimit-requests-limit", "50", "anthropic-ratelimit-requests-remaining", "49",
		"anthropic-ratelimit-requests-reset", qtNow.Add(1200*time.Millisecond).Format(time.RFC3339Nano),
		"anthropic-ratelimit-tokens-remaining", "0"),
		[]Policy{qtQ(50, 0, 49, 1200*time.Millisecond).qtBucket()}},
	{"anthropic/bad_time_ignored", qtHeader("anthropic-ratelimit-requests-remaining", "0", "anthropic-ratelimit-requests-reset", "soon"),
		[]Policy{qtQ(-1, 0, 0, -1).qtBucket()}},

	// Shopify: https://shopify.dev/docs/api/admin-rest/usage/rate-limits
	{"shopify/call_limit", qtHeader("X-Shopify-Shop-Api-Call-Limit", "32/40"), []Policy{qtQ(40, 0, 8, -1)}},
	{"shopify/over_full", qtHeader("X-Shopify-Shop-Api-Call-Limit", "41/40"), []Policy{qtQ(40, 0, 0, -1)}},
	{"shopify/malformed", qtHeader("X-Shopify-Shop-Api-Call-Limit", "32"), nil},

	// Azure Resource Manager:
	// https://learn.microsoft.com/azure/azure-resource-manager/management/request-limits-and-throttling
	{"azure/remaining_by_scope", qtHeader("x-ms-ratelimit-remaining-subscription-reads", "11999",
		"x-ms-ratelimit-remaining-tenant-writes", "-1"),
		[]Policy{qtQ(-1, 0, 11999, -1).qtIn("subscription-reads")}},

	// Several families at once keep the IETF fields first.
	{"mixed/ietf_first", qtHeader("X-RateLimit-Remaining", "9", "RateLimit", `"a";r=1`),
		[]Policy{qtQ(-1, 0, 1, -1), qtQ(-1, 0, 9, -1)}},
	{"none/typical", qtHeader("Date", qtNow.Format(http.TimeFormat), "Content-Type", "application/json",
		"Content-Length", "12", "X-Request-Id", "abc", "Accept-Ranges", "bytes", "Retry-After", "3"), nil},
}

func TestParseQuotas(t *testing.T) {
	for _, row := range quotaRows {
		t.Run(row.name, func(t *testing.T) {
			qs := ReadQuotas(row.h, qtNow, qtMax)
			require.Equal(t, row.want, qtList(qs))
			qtCheck(t, qs, qtMax)
		})
	}
}

// qtList returns the quotas qs holds, nil for none.
func qtList(qs Quotas) []Policy {
	if qs.n == 0 {
		return nil
	}
	return qs.list[:qs.n]
}

// TestParseQuotasSpellings reads a map holding two spellings of one name
// many times: map order varies from range to range, the result may not.
func TestParseQuotasSpellings(t *testing.T) {
	h := http.Header{"X-Ratelimit-Remaining": {"5"}, "x-ratelimit-remaining": {"7"}, "X-RATELIMIT-REMAINING": {"9"}}
	for range 64 {
		require.Equal(t, []Policy{qtQ(-1, 0, 9, -1)}, qtList(ReadQuotas(h, qtNow, qtMax)))
	}
}

// TestParseQuotasDate measures a Unix reset on the response's Date, so
// that the client's clock, an hour ahead here, does not matter.
func TestParseQuotasDate(t *testing.T) {
	h := qtHeader("Date", qtNow.Format(http.TimeFormat), "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", qtEpoch(10*qtS))
	require.Equal(t, []Policy{qtQ(-1, 0, 0, 10*qtS).qtInstant()}, qtList(ReadQuotas(h, qtNow.Add(time.Hour), qtMax)))
	// Without a valid Date, the client's clock: the reset is past.
	h.Set("Date", "yesterday")
	require.Equal(t, []Policy{qtQ(-1, 0, 0, 0).qtInstant()}, qtList(ReadQuotas(h, qtNow.Add(time.Hour), qtMax)))
}

// TestParseQuotasClamp reads one reset under several clamps.
func TestParseQuotasClamp(t *testing.T) {
	h := qtHeader("RateLimit", `"a";r=0;t=20`)
	for _, c := range []struct {
		max, reset time.Duration
		clamped    bool
	}{{time.Minute, 20 * qtS, false}, {20 * qtS, 20 * qtS, false}, {19 * qtS, 19 * qtS, true}, {0, 0, true}, {-qtS, 0, true}} {
		q := ReadQuotas(h, qtNow, c.max).list[0]
		require.Equal(t, c.reset, q.Reset, "max %v", c.max)
		require.Equal(t, c.clamped, q.Clamped, "max %v", c.max)
		require.Equal(t, 20*qtS, q.Asked)
	}
}

// The four responses of the benchmark and the allocation test: one with
// none of these headers, two IETF policies, GitHub's form, OpenAI's form.
var qtBench = []struct {
	name string
	h    http.Header
}{
	{"none", qtHeader("Date", qtNow.Format(http.TimeFormat), "Content-Type", "application/json", "Content-Length", "512",
		"Server", "nginx", "Cache-Control", "no-store", "Vary", "Accept-Encoding", "X-Request-Id", "5f2a",
		"Strict-Transport-Security", "max-age=31536000")},
	{"ietf", qtHeader("Date", qtNow.Format(http.TimeFormat), "Content-Type", "application/json", "Content-Length", "512",
		"RateLimit-Policy", `"burst";q=100;w=60, "daily";q=1000;w=86400`, "RateLimit", `"burst";r=50;t=30, "daily";r=900;t=3600`)},
	{"github", qtHeader("Date", qtNow.Format(http.TimeFormat), "Content-Type", "application/json", "Content-Length", "512",
		"X-RateLimit-Limit", "5000", "X-RateLimit-Remaining", "4999", "X-RateLimit-Reset", qtEpoch(3000*qtS),
		"X-RateLimit-Used", "1", "X-RateLimit-Resource", "core", "X-GitHub-Request-Id", "CAFE:1")},
	{"openai", qtHeader("Date", qtNow.Format(http.TimeFormat), "Content-Type", "application/json", "Content-Length", "512",
		"x-ratelimit-limit-requests", "5000", "x-ratelimit-remaining-requests", "4999", "x-ratelimit-reset-requests", "12ms",
		"x-ratelimit-limit-tokens", "160000", "x-ratelimit-remaining-tokens", "159976", "x-ratelimit-reset-tokens", "9ms")},
}

// TestParseQuotasAllocs: none of the four common responses allocates.
func TestParseQuotasAllocs(t *testing.T) {
	for _, c := range qtBench {
		var qs Quotas
		allocs := testing.AllocsPerRun(100, func() { qs = ReadQuotas(c.h, qtNow, qtMax) })
		require.Zero(t, allocs, c.name)
		require.Equal(t, c.name == "none", qs.n == 0, c.name)
	}
}

func BenchmarkReadQuotas(b *testing.B) {
	for _, c := range qtBench {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			var qs Quotas
			for b.Loop() {
				qs = ReadQuotas(c.h, qtNow, qtMax)
			}
			_ = qs
		})
	}
	// The alternative ReadQuotas does not take, for comparison in the same
	// run: a lookup of each canonical name it reads, on the response with
	// none (lowercase keys would need as many again).
	b.Run("none/lookup_each_canonical_name", func(b *testing.B) {
		var names []string
		for _, n := range quotaHeaderNames {
			names = append(names, http.CanonicalHeaderKey(n))
		}
		h, found := qtBench[0].h, 0
		for b.Loop() {
			for _, n := range names {
				if _, ok := h[n]; ok {
					found++
				}
			}
		}
		require.Zero(b, found)
	})
}
