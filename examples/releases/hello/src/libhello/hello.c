#include <stdio.h>

#include "hello.h"

int hello_format(char *buf, size_t len, const char *greeting, const char *name)
{
	return snprintf(buf, len, "%s, %s!\n", greeting, name);
}
