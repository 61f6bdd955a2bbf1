// Command releasetool holds the release checks of the retryhttp
// repository, in the standard library only (the library's module may gain
// no dependencies, and this module has none either):
//
//	releasetool proxy -repo DIR -version V -out PROXYDIR MODDIR...
//	    builds each module's zip at V from the working tree and lays the
//	    zips out as a GOPROXY directory (.info, .mod, .zip and list).
//	releasetool requires -repo DIR -version V
//	    reports what each module of the repository requires of the others,
//	    and fails if any requirement is not V.
//	releasetool sums -proxy PROXYDIR -gosum FILE MODULE@VERSION...
//	    checks that a go.sum's hashes of those modules are those of the
//	    zips in PROXYDIR: the build used the zips, not a stale copy.
//	releasetool api [-check FILE | -o FILE] MODDIR
//	    prints, checks or writes a module's exported API.
//
// It lives in a module of its own under .ci so that it is no package of
// the library and no file of the library's module zip.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "proxy":
		err = proxyMain(args)
	case "requires":
		err = requiresMain(args)
	case "sums":
		err = sumsMain(args)
	case "api":
		err = apiMain(args)
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "releasetool:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: releasetool proxy|requires|sums|api [flags] (see the package doc)")
	os.Exit(2)
}
