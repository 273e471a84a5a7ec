// Asio's SSL support compiled once for the whole project.
#include <boost/asio/ssl/impl/src.hpp>
