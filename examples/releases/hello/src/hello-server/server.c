/* hello-server: answers every HTTP request on a port with one static greeting.
 *
 * usage: hello-server PORT GREETING NAME [BODY_FILE]
 * The response body is hello_format(GREETING, NAME), then the contents of BODY_FILE.
 * It listens on every address, or on HELLO_BIND (an IPv4 address) when that is set. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <hello.h>

static char body[65536];

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: %s PORT GREETING NAME [BODY_FILE]\n", argv[0]);
		return 2;
	}
	int n = hello_format(body, sizeof body, argv[2], argv[3]);
	if (n < 0 || (size_t)n >= sizeof body)
		return 1;
	if (argc > 4) {
		FILE *f = fopen(argv[4], "r");
		if (f) {
			n += (int)fread(body + n, 1, sizeof body - (size_t)n - 1, f);
			fclose(f);
		}
	}
	signal(SIGPIPE, SIG_IGN);
	int s = socket(AF_INET, SOCK_STREAM, 0);
	int one = 1;
	setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	struct sockaddr_in addr = {0};
	addr.sin_family = AF_INET;
	addr.sin_addr.s_addr = htonl(INADDR_ANY);
	const char *bind_to = getenv("HELLO_BIND");
	if (bind_to && *bind_to && inet_pton(AF_INET, bind_to, &addr.sin_addr) != 1) {
		fprintf(stderr, "hello-server: HELLO_BIND=%s is not an IPv4 address\n", bind_to);
		return 2;
	}
	addr.sin_port = htons((unsigned short)atoi(argv[1]));
	if (s < 0 || bind(s, (struct sockaddr *)&addr, sizeof addr) < 0 || listen(s, 16) < 0) {
		perror("hello-server");
		return 1;
	}
	fprintf(stderr, "hello-server listening on port %s\n", argv[1]);
	for (;;) {
		int c = accept(s, NULL, NULL);
		if (c < 0)
			continue;
		char req[4096];
		(void)read(c, req, sizeof req); /* one read is enough for a GET */
		char head[256];
		int h = snprintf(head, sizeof head,
				 "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n"
				 "Content-Length: %d\r\nConnection: close\r\n\r\n", n);
		(void)write(c, head, (size_t)h);
		(void)write(c, body, (size_t)n);
		close(c);
	}
}
