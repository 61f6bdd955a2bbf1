package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestModuleAPISample lists testdata/apisample, a module with a
// declaration of each kind, and compares the whole listing: this is the
// format's definition. Test files, internal packages, main packages and
// unexported names are absent; promoted methods are present; parameter
// names and struct tags are not.
func TestModuleAPISample(t *testing.T) {
	modPath, lines, err := moduleAPI("testdata/apisample")
	if err != nil {
		t.Fatal(err)
	}
	if modPath != "example.com/apisample" {
		t.Errorf("module path %q", modPath)
	}
	want := []string{
		"const KindA Kind = 0",
		"const KindB Kind = 1",
		"const Timeout time.Duration = 2000000000 // 2s",
		`const Untyped = "x"`,
		"func Anon(struct{ A int }, func(int) string) map[string][]*T",
		"func Chans(chan<- int, <-chan string, chan (<-chan int))",
		"func New(io.Reader, ...Option) (*T, error)",
		"func Ordered[S ~[]E, E interface{ ~int | ~string }](S) E",
		"func Sum[N Number](...N) N",
		"method (*Embedded) Promoted() int",
		"method (*T) Pointer(context.Context) error",
		"method (Kind) String() string",
		"method (Pair[K, V]) String() string",
		"method (T) Promoted() int",
		"method (T) Read([]byte) (int, error)",
		"method (T) Value()",
		"type Alias = T",
		"type Embedded struct",
		"type Embedded struct, X int",
		"type Iface interface { Close, Do }",
		"type Iface interface, Close() error",
		"type Iface interface, Do(int) string",
		"type Kind int",
		"type Number interface{ ~int | ~float64 }",
		"type Option func(*config)",
		"type Pair[K comparable, V any] struct",
		"type Pair[K comparable, V any] struct, Key K",
		"type Pair[K comparable, V any] struct, Val V",
		"type Sealed interface, Exported()",
		"type Sealed interface, unexported methods",
		"type T struct",
		"type T struct, Name string",
		"type T struct, embedded *Embedded",
		"type T struct, embedded io.Reader",
		"var ErrX error",
	}
	for i := range want {
		want[i] = "pkg apisample, " + want[i]
	}
	if got, w := strings.Join(lines, "\n"), strings.Join(want, "\n"); got != w {
		t.Errorf("listing differs:\n%s", lineDiff(w+"\n", got+"\n"))
	}
}

// TestAPICheck writes the sample's API file, checks it (it passes), edits
// one line and checks again: the check fails, naming the module and the
// command, and the diff shows the edit.
func TestAPICheck(t *testing.T) {
	file := filepath.Join(t.TempDir(), "api.txt")
	if err := apiMain([]string{"-o", file, "testdata/apisample"}); err != nil {
		t.Fatal(err)
	}
	if err := apiMain([]string{"-check", file, "testdata/apisample"}); err != nil {
		t.Fatalf("check of a file just written: %v", err)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(data), "func Sum[N Number](...N) N", "func Sum[N Number]([]N) N", 1)
	if edited == string(data) {
		t.Fatal("the sample lists no Sum")
	}
	if err := os.WriteFile(file, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	err = apiMain([]string{"-check", file, "testdata/apisample"})
	if err == nil || !strings.Contains(err.Error(), "exported API of example.com/apisample changed") || !strings.Contains(err.Error(), regenerate) {
		t.Fatalf("check of an edited file: %v", err)
	}
	diff := lineDiff(edited, string(data))
	if diff != "+pkg apisample, func Sum[N Number](...N) N\n-pkg apisample, func Sum[N Number]([]N) N\n" {
		t.Errorf("diff:\n%s", diff)
	}
}
