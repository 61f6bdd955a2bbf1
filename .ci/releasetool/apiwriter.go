package main

import (
	"fmt"
	"go/constant"
	"go/types"
	"slices"
	"strings"
	"time"
)

// apiWriter turns a package's exported objects into lines in the manner of
// Go's own api/*.txt files: one line per constant, variable, function,
// type, exported struct field, interface method and method, each naming
// its package, with parameter names left out (renaming one changes no
// caller).
type apiWriter struct {
	p      printer
	prefix string // "pkg NAME, "
	lines  []string
}

func (w *apiWriter) emit(format string, args ...any) {
	w.lines = append(w.lines, w.prefix+fmt.Sprintf(format, args...))
}

func (w *apiWriter) object(obj types.Object) {
	switch obj := obj.(type) {
	case *types.Const:
		w.constant(obj)
	case *types.Var:
		w.emit("var %s %s", obj.Name(), w.p.typeString(obj.Type()))
	case *types.Func:
		sig := obj.Type().(*types.Signature)
		w.emit("func %s%s%s", obj.Name(), w.p.typeParams(sig.TypeParams()), w.p.signature(sig))
	case *types.TypeName:
		w.typeName(obj)
	}
}

// constant writes "const X = value" for an untyped constant and
// "const X T = value" for a typed one; a value too long to read is
// abbreviated, and a time.Duration's is also given as a duration.
func (w *apiWriter) constant(c *types.Const) {
	val := c.Val().ExactString()
	if len(val) > 80 {
		val = c.Val().String()
	}
	typ := ""
	if b, ok := c.Type().(*types.Basic); !ok || b.Info()&types.IsUntyped == 0 {
		typ = " " + w.p.typeString(c.Type())
	}
	if n, ok := c.Type().(*types.Named); ok && n.Obj().Pkg() != nil && n.Obj().Pkg().Path() == "time" && n.Obj().Name() == "Duration" {
		if ns, exact := constant.Int64Val(c.Val()); exact {
			val += " // " + time.Duration(ns).String()
		}
	}
	w.emit("const %s%s = %s", c.Name(), typ, val)
}

// typeName writes a type's line, then its exported fields or interface
// methods, then its exported methods, promoted ones included.
func (w *apiWriter) typeName(obj *types.TypeName) {
	if obj.IsAlias() {
		w.emit("type %s = %s", obj.Name(), w.p.typeString(types.Unalias(obj.Type())))
		return
	}
	named, ok := obj.Type().(*types.Named)
	if !ok {
		return
	}
	head := "type " + obj.Name() + w.p.typeParams(named.TypeParams())
	switch u := named.Underlying().(type) {
	case *types.Struct:
		w.emit("%s struct", head)
		for f := range u.Fields() {
			switch {
			case !f.Exported():
			case f.Embedded():
				w.emit("%s struct, embedded %s", head, w.p.typeString(f.Type()))
			default:
				w.emit("%s struct, %s %s", head, f.Name(), w.p.typeString(f.Type()))
			}
		}
	case *types.Interface:
		if !u.IsMethodSet() {
			// A constraint with a type set: its literal says it all.
			w.emit("%s %s", head, w.p.typeString(u))
			return
		}
		w.iface(head, u)
		return // an interface's methods are listed as its own
	default:
		w.emit("%s %s", head, w.p.typeString(u))
	}
	w.methods(obj, named)
}

// iface writes an interface as Go's api files do: one line per method of
// its method set, embedded interfaces' included, and one line naming them
// all; or, when the set holds unexported methods (only this package can
// implement it, so methods may be added), a line saying so instead.
func (w *apiWriter) iface(head string, u *types.Interface) {
	var names []string
	sealed := false
	for m := range u.Methods() {
		if !m.Exported() {
			sealed = true
			continue
		}
		names = append(names, m.Name())
		w.emit("%s interface, %s%s", head, m.Name(), w.p.signature(m.Type().(*types.Signature)))
	}
	if sealed {
		w.emit("%s interface, unexported methods", head)
		return
	}
	slices.Sort(names)
	if len(names) == 0 {
		w.emit("%s interface {}", head)
		return
	}
	w.emit("%s interface { %s }", head, strings.Join(names, ", "))
}

// methods writes the exported methods of T's method set as (T), and those
// that only *T has as (*T); methods promoted from embedded fields are
// included, since they are called as the type's own.
func (w *apiWriter) methods(obj *types.TypeName, named *types.Named) {
	recv := obj.Name()
	if tps := named.TypeParams(); tps.Len() > 0 {
		var ns []string
		for tp := range tps.TypeParams() {
			ns = append(ns, tp.Obj().Name())
		}
		recv += "[" + strings.Join(ns, ", ") + "]"
	}
	value := map[string]bool{}
	vset := types.NewMethodSet(named)
	for sel := range vset.Methods() {
		if m := sel.Obj(); m.Exported() {
			value[m.Name()] = true
			w.emit("method (%s) %s%s", recv, m.Name(), w.p.signature(sel.Type().(*types.Signature)))
		}
	}
	for sel := range types.NewMethodSet(types.NewPointer(named)).Methods() {
		if m := sel.Obj(); m.Exported() && !value[m.Name()] {
			w.emit("method (*%s) %s%s", recv, m.Name(), w.p.signature(sel.Type().(*types.Signature)))
		}
	}
}
