#ifndef HELLO_H
#define HELLO_H

#include <stddef.h>

/* Writes "<greeting>, <name>!\n" into buf (at most len bytes, NUL-terminated) and
 * returns the length of the text, as snprintf does. */
int hello_format(char *buf, size_t len, const char *greeting, const char *name);

#endif
