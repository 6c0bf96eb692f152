module kubosh.io/testbins

go 1.26.0
