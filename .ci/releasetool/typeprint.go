package main

import (
	"fmt"
	"go/types"
	"slices"
	"strings"
)

// printer writes types as Go source does, with two differences that keep
// the listing about what callers depend on: parameter and result names are
// left out, and struct tags too. Types of other packages are qualified by
// the package's name, those of the package listed are not.
type printer struct {
	pkg *types.Package
}

func (p printer) typeString(t types.Type) string {
	var b strings.Builder
	p.write(&b, t)
	return b.String()
}

func (p printer) write(b *strings.Builder, t types.Type) {
	switch t := t.(type) {
	case *types.Basic:
		if t.Kind() == types.UnsafePointer {
			b.WriteString("unsafe.")
		}
		b.WriteString(t.Name())
	case *types.Pointer:
		b.WriteString("*")
		p.write(b, t.Elem())
	case *types.Slice:
		b.WriteString("[]")
		p.write(b, t.Elem())
	case *types.Array:
		fmt.Fprintf(b, "[%d]", t.Len())
		p.write(b, t.Elem())
	case *types.Map:
		b.WriteString("map[")
		p.write(b, t.Key())
		b.WriteString("]")
		p.write(b, t.Elem())
	case *types.Chan:
		p.chan_(b, t)
	case *types.Signature:
		b.WriteString("func")
		b.WriteString(p.signature(t))
	case *types.Struct:
		p.struct_(b, t)
	case *types.Interface:
		p.interface_(b, t)
	case *types.Union:
		for i := range t.Len() {
			if i > 0 {
				b.WriteString(" | ")
			}
			if t.Term(i).Tilde() {
				b.WriteString("~")
			}
			p.write(b, t.Term(i).Type())
		}
	case *types.TypeParam:
		b.WriteString(t.Obj().Name())
	case *types.Named:
		p.name(b, t.Obj())
		p.typeArgs(b, t.TypeArgs())
	case *types.Alias:
		p.name(b, t.Obj())
		p.typeArgs(b, t.TypeArgs())
	default:
		// A kind of type this printer does not know (a newer go/types):
		// go/types' own form, names and all, rather than nothing.
		b.WriteString(types.TypeString(t, p.qualifier))
	}
}

func (p printer) qualifier(pkg *types.Package) string {
	if pkg == p.pkg {
		return ""
	}
	return pkg.Name()
}

// name writes a named type's or an alias's name, qualified unless it is
// the listed package's own or a predeclared one (error, any, comparable).
func (p printer) name(b *strings.Builder, obj *types.TypeName) {
	if obj.Pkg() != nil && obj.Pkg() != p.pkg {
		b.WriteString(obj.Pkg().Name())
		b.WriteString(".")
	}
	b.WriteString(obj.Name())
}

func (p printer) typeArgs(b *strings.Builder, args *types.TypeList) {
	if args.Len() == 0 {
		return
	}
	b.WriteString("[")
	for i := range args.Len() {
		if i > 0 {
			b.WriteString(", ")
		}
		p.write(b, args.At(i))
	}
	b.WriteString("]")
}

func (p printer) chan_(b *strings.Builder, t *types.Chan) {
	switch t.Dir() {
	case types.SendOnly:
		b.WriteString("chan<- ")
	case types.RecvOnly:
		b.WriteString("<-chan ")
	default:
		b.WriteString("chan ")
	}
	// chan (<-chan T) needs its parentheses: chan <-chan T would parse as
	// chan<- (chan T).
	if e, ok := t.Elem().(*types.Chan); ok && t.Dir() == types.SendRecv && e.Dir() == types.RecvOnly {
		b.WriteString("(")
		p.write(b, e)
		b.WriteString(")")
		return
	}
	p.write(b, t.Elem())
}

func (p printer) struct_(b *strings.Builder, t *types.Struct) {
	b.WriteString("struct{")
	for i := range t.NumFields() {
		if i > 0 {
			b.WriteString(";")
		}
		b.WriteString(" ")
		f := t.Field(i)
		if !f.Embedded() {
			b.WriteString(f.Name())
			b.WriteString(" ")
		}
		p.write(b, f.Type())
	}
	if t.NumFields() > 0 {
		b.WriteString(" ")
	}
	b.WriteString("}")
}

// interface_ writes an interface literal: its explicit methods, sorted,
// then what it embeds; an implicit constraint ([T ~int]) as its one term.
func (p printer) interface_(b *strings.Builder, t *types.Interface) {
	if t.IsImplicit() && t.NumEmbeddeds() == 1 {
		p.write(b, t.EmbeddedType(0))
		return
	}
	var elems []string
	for m := range t.ExplicitMethods() {
		elems = append(elems, m.Name()+p.signature(m.Type().(*types.Signature)))
	}
	slices.Sort(elems)
	for e := range t.EmbeddedTypes() {
		elems = append(elems, p.typeString(e))
	}
	if len(elems) == 0 {
		b.WriteString("interface{}")
		return
	}
	b.WriteString("interface{ ")
	b.WriteString(strings.Join(elems, "; "))
	b.WriteString(" }")
}

// signature writes "(P1, P2) R" or "(P1, ...P2) (R1, R2)", without the
// receiver or any name.
func (p printer) signature(sig *types.Signature) string {
	var b strings.Builder
	b.WriteString("(")
	params := sig.Params()
	for i := range params.Len() {
		if i > 0 {
			b.WriteString(", ")
		}
		t := params.At(i).Type()
		if sig.Variadic() && i == params.Len()-1 {
			b.WriteString("...")
			if s, ok := t.(*types.Slice); ok {
				t = s.Elem()
			}
		}
		p.write(&b, t)
	}
	b.WriteString(")")
	switch res := sig.Results(); res.Len() {
	case 0:
	case 1:
		b.WriteString(" ")
		p.write(&b, res.At(0).Type())
	default:
		b.WriteString(" (")
		for i := range res.Len() {
			if i > 0 {
				b.WriteString(", ")
			}
			p.write(&b, res.At(i).Type())
		}
		b.WriteString(")")
	}
	return b.String()
}

// typeParams writes "[K comparable, V any]", or nothing for a type or
// function without type parameters.
func (p printer) typeParams(tps *types.TypeParamList) string {
	if tps.Len() == 0 {
		return ""
	}
	var parts []string
	for tp := range tps.TypeParams() {
		parts = append(parts, tp.Obj().Name()+" "+p.typeString(tp.Constraint()))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
