package sample

func ExportedInTest() {}
