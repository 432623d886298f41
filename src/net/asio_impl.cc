// The one translation unit that compiles Asio (BOOST_ASIO_SEPARATE_COMPILATION), SSL included.
#include <utility>

#include <boost/asio/impl/src.hpp>
#include <boost/asio/ssl/impl/src.hpp>
