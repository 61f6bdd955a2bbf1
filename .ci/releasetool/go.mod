module releasetool

go 1.26.0
