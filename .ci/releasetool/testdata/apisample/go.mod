module example.com/apisample

go 1.26.0
